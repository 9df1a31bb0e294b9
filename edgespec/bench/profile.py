"""`edgespec profile`: a workload run with the process's memory sampled over time
(psutil), the memory model's prediction set against what was measured, and,
with a sweep, speed-up against memory budget.

Each budget of a sweep runs in a fresh process, because peak RSS only grows.
Within a run, plain decoding and speculation alternate prompt by prompt on the
same loaded model, so their ratio is measured side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from edgespec.api import EdgeSpec
from edgespec.bench.common import encode_prompt, print_wide, timed
from edgespec.bench.record import rows_of
from edgespec.drafters import PLAIN
from edgespec.errors import EdgespecError
from edgespec.memory.footprint import fmt_bytes, parse_bytes, peak_rss, process_rss
from edgespec.runtimes.gpu.devices import place
from edgespec.speculative.engine import Engine

WEIGHTS = ("weights_resident", "vocab", "kv_cache", "runtime", "gpu_weights", "gpu_kv_cache")  # resident once loaded
RUNNING = ("compute", "logits", "tables", "gpu_compute", "gpu_driver")  # touched while generating


@dataclass
class MemorySampler:
    """Samples this process's RSS in a background thread (llama.cpp releases the GIL while it computes)."""

    interval: float = 0.02
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (seconds, rss, mapped)
    marks: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> dict[str, int]:
        m = process_rss()
        self.samples.append((time.perf_counter() - self._t0, m["rss"], m["mapped"]))
        return m

    def mark(self, label: str) -> dict[str, int]:
        self.marks.append((time.perf_counter() - self._t0, label))
        return self.sample()

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_profile(model: str, drafter: str, budget: str | int | None, n_ctx: int, threads: int | None,
                max_draft: int, max_tokens: int, prompts: list[dict], device: str = "cpu") -> dict:
    """Load, generate every prompt (plain and speculative alternately), and report
    the plan, predicted against measured memory, and speeds."""
    from edgespec.runtimes.llamacpp import init_backend, default_threads

    init_backend(device)  # a GPU driver's start belongs to the baseline, as when EdgeSpec plans
    place(device)
    with MemorySampler() as mem:
        start = mem.mark("start")
        # a fixed thread count: plain and speculative share the backend and are compared side by side;
        # nothing timed at idle, which would fall between the phases the profile times
        llm = EdgeSpec(model, drafter=drafter, n_ctx=n_ctx, threads=threads or default_threads(), max_draft=max_draft,
                       memory_budget=budget, quiet=True, device=device, idle_timing=False)
        try:
            if llm.plan is None:
                raise EdgespecError(f"{model} is not a GGUF model: the memory model covers llama.cpp models")
            loaded = mem.mark("loaded")
            encoded = [encode_prompt(p, llm) for p in prompts]
            longest = max(len(ids) for ids in encoded)
            if longest + max_tokens > llm.backend.n_ctx:
                raise EdgespecError(f"a prompt of {longest} tokens plus {max_tokens} new ones exceeds the "
                                    f"planned context of {llm.backend.n_ctx}")
            plain = Engine(llm.backend, None)
            spec = llm.engine if llm.drafter is not None else None
            if spec is not None:  # every verification width once: a GPU driver's pipelines are what the plan counts
                spec.calibrate(warm=True)
            for eng in (plain, spec):  # as in the bench: first calls pay for cold caches and allocations
                if eng is not None:
                    eng.reset()
                    for _ in eng.generate(encoded[0][:32], 8):
                        pass
            speed = {"plain": [0, 0.0], "speculative": [0, 0.0]}
            drafted = accepted = 0
            for ids in encoded:
                for name, eng in (("plain", plain), ("speculative", spec)):
                    if eng is None:
                        continue
                    eng.reset()
                    toks, dt = timed(eng.generate(ids, max_tokens))
                    speed[name][0] += max(len(toks) - 1, 0)
                    speed[name][1] += dt
                    if name == "speculative":
                        drafted += eng.last_stats.drafted
                        accepted += eng.last_stats.accepted
            done = mem.mark("generated")
        finally:
            llm.close()
    peak = peak_rss() or max(s[1] for s in mem.samples)
    plan = llm.plan
    fp = plan.predict(prefill=longest, baseline=start["rss"])
    comps = fp.components

    def pred(names: tuple[str, ...]) -> int:  # the target's and a drafter model's parts alike
        return sum(v for k, v in comps.items() if k.removeprefix("drafter_") in names)

    t_loaded = next(t for t, label in mem.marks if label == "loaded")
    running_peak = max(rss for t, rss, _ in mem.samples if t >= t_loaded)

    rows = [
        ("baseline (measured: interpreter and libraries)", start["rss"], start["rss"]),
        ("weights, memory-mapped file pages", pred(("weights_mapped",)), loaded["mapped"] - start["mapped"]),
        ("weights read or repacked, vocabulary, KV cache", pred(WEIGHTS), loaded["anon"] - start["anon"]),
        ("generation: activations, logits, drafter tables", pred(RUNNING), running_peak - loaded["rss"]),
        ("total (peak RSS)", fp.total, peak),
    ]
    tps = {k: (n / s if s else 0.0) for k, (n, s) in speed.items()}
    return {
        "model": model, "drafter": drafter, "plan": plan.to_dict(), "plan_summary": plan.summary(),
        "prompts": len(encoded), "max_tokens": max_tokens, "longest_prompt": longest,
        "components": [{"component": n, "predicted": p, "measured": m} for n, p, m in rows],
        "predicted_components": comps,
        "predicted_total": fp.total, "peak_rss": peak, "error": fp.total / peak - 1,
        "within_budget": None if plan.budget is None else peak <= plan.budget,
        "tokens_per_s": tps, "speedup": tps["speculative"] / tps["plain"] if tps["speculative"] and tps["plain"] else None,
        "acceptance": accepted / drafted if drafted else None,
        "samples": mem.samples, "marks": mem.marks, "phases": {"start": start, "loaded": loaded, "generated": done},
    }


def print_profile(r: dict, console: Console) -> None:
    console.print(f"[bold]{r['model']}[/] · {r['plan_summary']}", highlight=False)
    for note in r["plan"]["notes"]:
        console.print(f"  [dim]plan: {note}[/]", highlight=False)
    t = Table("component", "predicted", "measured", "difference")
    for c in r["components"]:
        p, m = c["predicted"], c["measured"]
        t.add_row(c["component"], fmt_bytes(p), fmt_bytes(m), f"{(p - m) / 1e6:+.0f} MB")
    console.print(t)
    line = f"predicted total {fmt_bytes(r['predicted_total'])}, measured peak {fmt_bytes(r['peak_rss'])} " \
           f"({r['error']:+.1%})"
    if r["plan"]["budget"]:
        line += f"; budget {fmt_bytes(r['plan']['budget'])}: {'within' if r['within_budget'] else 'EXCEEDED'}"
    console.print(line, highlight=False)
    tps = r["tokens_per_s"]
    if r["speedup"]:
        acc = f"{r['acceptance']:.0%}" if r["acceptance"] is not None else "-, nothing drafted"
        console.print(f"plain {tps['plain']:.2f} tok/s, speculative {tps['speculative']:.2f} tok/s: "
                      f"{r['speedup']:.2f}x (acceptance {acc})", highlight=False)
    else:
        console.print(f"plain {tps['plain']:.2f} tok/s", highlight=False)


def sweep(model: str, drafter: str, budgets: list[str | None], n_ctx: int, threads: int | None, max_draft: int,
          max_tokens: int, prompts_path: Path | None, limit: int | None, console: Console,
          category: str | None = None, device: str = "cpu") -> list[dict]:
    """One fresh process per budget (None: unconstrained); failures to fit are rows too."""
    results = []
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("profile", total=len(budgets))
        for b in budgets:
            bar.update(task, description=f"budget {b or 'none'}")
            args = ["-d", drafter, "--ctx", str(n_ctx), "--max-draft", str(max_draft), "-n", str(max_tokens),
                    "--category", category or "", "--device", device]
            args += ["--memory-budget", str(b)] if b else []
            args += ["--threads", str(threads)] if threads else []
            args += ["--prompts", str(prompts_path)] if prompts_path else []
            args += ["--limit", str(limit)] if limit else []
            results.append({**profile_child(model, args), "budget_arg": b})
            bar.advance(task)
    return results


def profile_child(model: str, args: list[str]) -> dict:
    """`edgespec profile MODEL ARGS` in a fresh process (peak RSS only grows): its result, or
    {"error_message": its one-line error}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "edgespec", "profile", model, *args, "--json", str(out), "--quiet"]
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
        if p.returncode == 0:
            return rows_of(json.loads(out.read_text()))[0]
    msg = (p.stderr.strip().splitlines() or ["failed"])[-1]
    return {"error_message": msg.removeprefix("error: ")}


def print_sweep(results: list[dict], console: Console, plain: int | None = None) -> None:
    """`plain`: plain decoding's footprint, to show budgets as multiples of it."""
    t = Table(*SWEEP_COLUMNS)
    for cells in sweep_cells(results, plain):
        t.add_row(*cells)
    print_wide(console, t, 150)


def plot(out: Path, run: dict | None, results: list[dict] | None) -> None:
    """Memory over time (one run) and speed-up against budget (a sweep)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [x for x in (run, results) if x]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
    ax_i = 0
    if run:
        ax = axes[0][ax_i]
        ax_i += 1
        ts = [s[0] for s in run["samples"]]
        ax.plot(ts, [s[1] / 1e6 for s in run["samples"]], label="RSS")
        ax.plot(ts, [s[2] / 1e6 for s in run["samples"]], label="of which file-mapped", alpha=0.7)
        ax.axhline(run["predicted_total"] / 1e6, ls="--", color="gray", label="predicted")
        if run["plan"]["budget"]:
            ax.axhline(run["plan"]["budget"] / 1e6, ls=":", color="red", label="budget")
        for t, label in run["marks"]:
            ax.axvline(t, color="black", lw=0.5, alpha=0.4)
            ax.annotate(label, (t, ax.get_ylim()[1]), fontsize=7, rotation=90, va="top")
        ax.set_xlabel("seconds")
        ax.set_ylabel("MB")
        ax.set_title(f"{run['model']}: memory over time")
        ax.legend(fontsize=8)
    if results:
        ax = axes[0][ax_i]
        ok = [r for r in results if "error_message" not in r and r.get("speedup")]
        limited = sorted((r for r in ok if r["plan"]["budget"]), key=lambda r: r["plan"]["budget"])
        ax.plot([r["plan"]["budget"] / 1e6 for r in limited], [r["speedup"] for r in limited], "o-",
                label="speed-up within budget")
        free = [r for r in ok if not r["plan"]["budget"]]
        if free:
            ax.axhline(free[0]["speedup"], ls="--", color="gray", label="unconstrained")
        for r in limited:
            ax.annotate(r["plan"]["drafter"], (r["plan"]["budget"] / 1e6, r["speedup"]), fontsize=7)
        ax.axhline(1.0, color="black", lw=0.5)
        ax.set_xlabel("memory budget (MB)")
        ax.set_ylabel("speed-up over plain decoding")
        ax.set_title("throughput against budget")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


SWEEP_COLUMNS = ("budget", "plan", "predicted", "peak RSS", "plain tok/s", "spec tok/s", "speed-up", "of unconstrained")


def sweep_cells(results: list[dict], plain: int | None = None) -> list[list[str]]:
    """A sweep's rows, budgets also as multiples of `plain` (plain decoding's footprint), the
    speed-up also as a share of the unconstrained run's."""
    ref = next((r for r in results if r.get("budget_arg") is None and r.get("speedup")), None)
    rows = []
    for r in results:
        b = r.get("budget_arg")
        if b is not None:
            n = parse_bytes(str(b))
            b = fmt_bytes(n) + (f" (plain x{n / plain:.2f})" if plain else "")
        if "error_message" in r:
            rows.append([b or "none", r["error_message"], *[""] * 6])
            continue
        p = r["plan"]
        plan = (f"ctx {p['n_ctx']}, KV {p['kv_type']}, batch {p['n_batch']}, {p['load']}, {p['drafter']}"
                + (f" k≤{p['max_draft']}" if p["drafter"] != PLAIN else ""))
        keep = f"{r['speedup'] / ref['speedup']:.0%}" if ref and r.get("speedup") else "-"
        rows.append([b or "none", plan, fmt_bytes(r["predicted_total"]), fmt_bytes(r["peak_rss"]),
                     f"{r['tokens_per_s']['plain']:.2f}", f"{r['tokens_per_s']['speculative']:.2f}",
                     f"{r['speedup']:.2f}x" if r.get("speedup") else "-", keep])
    return rows


def sweep_table(rec: dict) -> list[str]:
    return (["| " + " | ".join(SWEEP_COLUMNS) + " |", "|---" * len(SWEEP_COLUMNS) + "|"]
            + ["| " + " | ".join(cells) + " |" for cells in sweep_cells(rec["rows"], rec["plain_footprint"])])


def profile_table(rec: dict) -> list[str]:
    """The run's plan, predicted total against measured peak RSS, and, on a GPU, the driver's
    memory as measured cold (a child process, Mesa's shader cache off) and counted in the plan."""
    out = ["| device | layers on the GPU | context | drafter | budget | GPU driver, measured cold | predicted | "
           "peak RSS | error |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rec["rows"]:
        plan, driver = r["plan"], r["predicted_components"].get("gpu_driver")
        out.append(f"| {r['device']} | {plan['n_gpu_layers'] or '-'} | {plan['n_ctx']} | {plan['drafter']} | "
                   f"{fmt_bytes(plan['budget']) if plan['budget'] else '-'} | {fmt_bytes(driver) if driver else '-'} | "
                   f"{fmt_bytes(r['predicted_total'])} | {fmt_bytes(r['peak_rss'])} | {r['error']:+.1%} |")
    return out
