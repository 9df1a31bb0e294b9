"""A bench run as a record: its rows with the machine and command that produced them,
and the markdown tables the docs show, generated from the record alone.

`edgespec bench --json FILE` writes the record; `edgespec bench --markdown FILE`
prints its tables. The docs keep each table between markers naming its record
(`<!-- bench docs/bench/NAME.json -->` ... `<!-- end bench -->`), and a test
regenerates every one of them byte for byte, so a table cannot drift from its data.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import psutil

from edgespec.bench.forced import markdown_lines as forced_lines
from edgespec.drafters import AUTO
from edgespec.memory.footprint import fmt_bytes, parse_bytes

SIMD = ("sse3", "ssse3", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
        "avx512_bf16", "amx_int8", "neon", "asimd", "sve")
START = re.compile(r"<!-- bench (\S+?)(?: (headline|curves|forced))? -->\n")
END = "<!-- end bench -->"


def machine() -> dict:
    """What a reader needs to compare this machine with theirs: CPU, cores, SIMD, llama.cpp build."""
    cpu = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            cpu.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(cpu.get("flags", cpu.get("Features", "")).split())
    return {
        "cpu": cpu.get("model name") or platform.processor() or platform.machine(),
        "cpu_family": cpu.get("cpu family"), "cpu_model": cpu.get("model"),
        "physical_cores": psutil.cpu_count(logical=False), "logical_cores": psutil.cpu_count(),
        "simd": [f for f in SIMD if f in flags],
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "llama_cpp": _llama_cpp_build(),
    }


def _llama_cpp_build() -> str:
    try:
        import llama_cpp

        info = llama_cpp.llama_print_system_info().decode().strip(" |")
        return f"llama-cpp-python {llama_cpp.__version__}: {info}"
    except Exception:  # no llama.cpp here: the record says so rather than fail the bench
        return "not installed"


def record(rows: list[dict], model: str, program: str = "edgespec", **fields) -> dict:
    """`program`: how this process was started (`edgespec`, `python3 -m MODULE`), before its
    arguments; `fields`: a record's kind and what its table needs beside the rows."""
    return {"date": time.strftime("%Y-%m-%d"), "command": f"{program} {shlex.join(sys.argv[1:])}",
            "model": model, "machine": machine(), "rows": rows, **fields}


def reproducing(command: str) -> str:
    """The command without `--json FILE`: where a run was written is not how it was made."""
    words = shlex.split(command)
    kept = [w for i, w in enumerate(words)
            if not (w == "--json" or w.startswith("--json=") or (i and words[i - 1] == "--json"))]
    return shlex.join(kept)


def rows_of(data: dict | list) -> list[dict]:
    """The rows of a record (or of a bare list of rows)."""
    return data["rows"] if isinstance(data, dict) else data


def markdown(rec: dict, view: str = "") -> str:
    """The record's table: every row; or (`headline`) plain, edgespec's default and the best
    llama-server type per category; or (`curves`) each runtime's batch costs; or (`forced`) the
    forced rows' acceptance, cost and projected speed-up (forced.py). A record of
    another kind (`kind`: export validation, memory sweep, footprints, server) has its own
    table, and a simulated FPGA's or a projected device's rows are labelled as such."""
    m = rec["machine"]
    cores = f"{m['physical_cores']} cores" if m.get("physical_cores") else f"{m['logical_cores']} logical cores"
    lines = [f"{rec['model']} on {m['cpu']} ({cores}, {', '.join(m['simd']).upper() or 'no SIMD flags'}), "
             f"{rec['date']}: `{reproducing(rec['command'])}`", ""]
    if rec.get("kind") in KINDS:
        lines += KINDS[rec["kind"]](rec)
    else:
        rows = rec["rows"]
        full = _fpga if "simulated_tokens_per_s" in rows[0] else _projected if "device_profile" in rows[0] else _full
        lines += {"headline": _headline, "curves": _curves, "forced": forced_lines}.get(view, full)(rows)
    return "\n".join(lines) + "\n"


EXPORTS = "export validation"  # a record of `python3 -m edgespec.bench.exports`
VALIDATION_HEADER = ["| source | format | size MB | top-1 agreement | max abs dlogit | perplexity (source) | ratio | ms/token |",
                     "|---|---|---:|---:|---:|---:|---:|---:|"]


SWEEP = "memory sweep"  # a record of `edgespec profile --sweep`
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
                + (f" k≤{p['max_draft']}" if p["drafter"] != "none" else ""))
        keep = f"{r['speedup'] / ref['speedup']:.0%}" if ref and r.get("speedup") else "-"
        rows.append([b or "none", plan, fmt_bytes(r["predicted_total"]), fmt_bytes(r["peak_rss"]),
                     f"{r['tokens_per_s']['plain']:.2f}", f"{r['tokens_per_s']['speculative']:.2f}",
                     f"{r['speedup']:.2f}x" if r.get("speedup") else "-", keep])
    return rows


SERVER = "server"  # a record of `python3 -m edgespec.bench.server`


def server_speeds(rows: list[dict]) -> tuple[float, float]:
    """Tokens/s through the Python API and through the server, over every prompt."""
    return tuple(sum(r[f"{side}_tokens"] for r in rows) / sum(r[f"{side}_seconds"] for r in rows)
                 for side in ("api", "server"))


FOOTPRINTS = "footprints"  # a record of `python3 -m edgespec.bench.footprints`


def footprint_lines(rows: list[dict]) -> list[str]:
    """Predicted / measured memory per target and drafter, a column per context."""
    ctxs = list(dict.fromkeys(r["ctx"] for r in rows))
    out = ["| target | drafter | " + " | ".join(f"context {c}" for c in ctxs) + " |", "|---|---|" + "---|" * len(ctxs)]
    cells: dict[tuple[str, str], dict[int, str]] = {}
    for r in rows:
        cells.setdefault((r["target"], r["drafter"]), {})[r["ctx"]] = (
            r["error_message"] if r.get("error_message") else
            f"{r['predicted_total'] / 1e6:.0f} / {r['peak_rss'] / 1e6:.0f} MB ({r['error']:+.1%})")
    for (target, drafter), by_ctx in cells.items():
        out.append(f"| {target} | {drafter} | " + " | ".join(by_ctx.get(c, "-") for c in ctxs) + " |")
    return out


def _server(rec: dict) -> list[str]:
    api, server = server_speeds(rec["rows"])
    return [f"| path ({rec['model']}, `{rec['drafter']}`, {len(rec['rows'])} prompts x {rec['max_tokens']} tokens) "
            "| tokens/s | x generate |", "|---|---:|---:|",
            f"| generate (Python API) | {api:.2f} | 1.00 |",
            f"| `edgespec serve` (openai client, SSE) | {server:.2f} | {server / api:.2f} |"]


def _sweep(rec: dict) -> list[str]:
    return (["| " + " | ".join(SWEEP_COLUMNS) + " |", "|---" * len(SWEEP_COLUMNS) + "|"]
            + ["| " + " | ".join(cells) + " |" for cells in sweep_cells(rec["rows"], rec["plain_footprint"])])


def validation_line(r: dict) -> str:
    return (f"| {r['source']} | {r['format']} | {r['size_mb']} | {r['top1_agreement']:.1%} | {r['max_abs_dlogit']:.2f} | "
            f"{r['perplexity_export']:.3f} ({r['perplexity_source']:.3f}) | {r['perplexity_ratio']:.3f} | "
            f"{r['decode_ms']:.1f} |")


ABLATIONS = "ablations"  # a record of `python3 -m edgespec.bench.ablations`


def ablation_lines(rec: dict) -> list[str]:
    """x plain per category with every rule, then with each rule taken out, per machine state
    (first run, fresh, or with stored rates); the curve priced at."""
    cats = _categories(rec["rows"])
    out = ["| machine | taken out | the rule | " + " | ".join(cats) + " |", "|---|---|---|" + "---:|" * len(cats)]
    by: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rec["rows"]:
        by.setdefault((r["machine"], r["taken_out"]), {})[r["category"]] = r
    for (machine, name), cells in by.items():
        rule = next(iter(cells.values()))["rule"]
        out.append(f"| {machine} | {name} | {rule} | "
                   + " | ".join(_fmt(cells[c]["ratio_to_plain"], ".3f") for c in cats) + " |")
    ms = rec["batch_costs_ms"]
    sizes = [n for n in (2, 4, 8, 16) if n <= len(ms)]
    return out + ["", f"`{rec['drafter']}` replayed on plain's texts, x plain; batches priced at one token "
                      f"{ms[0]:.1f} ms, " + ", ".join(f"{n} tokens {ms[n - 1] / ms[0]:.2f}x" for n in sizes) + "."]


BATCH_CURVES = "batch curves"  # a record of `python3 -m edgespec.bench.curves`


def batch_curve_lines(rec: dict) -> list[str]:
    """Each timing's batch costs in units of its own one-token cost, their median, and the
    prior the controller prices a size at until it is measured; one token's ms in the header."""
    rows = rec["rows"]
    units = [[ms / r["batch_costs_ms"][0] for ms in r["batch_costs_ms"]] for r in rows]
    ones = ", ".join(f"{r['batch_costs_ms'][0]:.1f}" for r in rows)
    out = ["| tokens in the batch | " + " | ".join(f"timing {r['timing']} ({r['after']})" for r in rows)
           + " | median | prior |", "|---:|" + "---:|" * (len(rows) + 2)]
    for n in range(2, len(units[0]) + 1):
        cells = [u[n - 1] for u in units]
        out.append(f"| {n} | " + " | ".join(f"{c:.2f}" for c in cells)
                   + f" | {float(np.median(cells)):.2f} | {rec['prior_units'][n - 1]:.2f} |")
    busy = max((r["other_cores"] or 0.0) for r in rows)
    took = [r["took_s"] for r in rows]
    return out + ["", f"In units of one token timed in the same timing (one token: {ones} ms); each size the "
                      f"median of three, a timing {min(took):.1f}-{max(took):.1f} s. Other processes kept at most "
                      f"{busy:.2f} cores busy while a curve was timed."] + _builds_compared(rec)


def _builds_compared(rec: dict) -> list[str]:
    """The median curve of each build timed in the run, in units of its own one token, and its
    one token against this build's: edgespec's small-batch kernels on, off, another build."""
    builds = [("this build", "batch_costs_ms"), ("its small-batch kernels off", "batch_costs_kernels_off_ms"),
              (f"the build in {rec.get('other_build')}", "batch_costs_other_build_ms")]
    builds = [(name, key) for name, key in builds if all(key in r for r in rec["rows"])]
    if len(builds) < 2:
        return []
    med = {key: np.median([r[key] for r in rec["rows"]], axis=0) for _, key in builds}
    sizes = len(med["batch_costs_ms"])
    out = ["", "| build | one token (ms) | this build's one-token speed against it | "
           + " | ".join(f"{n}" for n in range(2, sizes + 1)) + " |", "|---|---:|---:|" + "---:|" * (sizes - 1)]
    for name, key in builds:
        c = med[key]
        out.append(f"| {name} | {c[0]:.1f} | {c[0] / med['batch_costs_ms'][0]:.3f}x | "
                   + " | ".join(f"{t / c[0]:.2f}" for t in c[1:]) + " |")
    return out + ["", "Medians over the timings, each build's sizes in units of its own one token."]


OTHER_PROGRAMS = "other programs"  # a record of `python3 -m edgespec.bench.other_programs`


def other_program_lines(rec: dict) -> list[str]:
    """Per share of a core another program wants: the cores edgespec measured it taking and
    tokens/s, on the most threads and on one fewer, and the one's speed against the other's."""
    by: dict[float, dict[int, dict]] = {}
    for r in rec["rows"]:
        by.setdefault(r["wants"], {})[r["threads"]] = r
    most = max(r["threads"] for r in rec["rows"])
    fewer = f"{most - 1} thread" + "s" * (most > 2)
    out = [f"| the program wants, of a core | cores measured beside {most} threads | beside {fewer} | "
           f"tok/s on {most} threads | on {fewer} | {fewer} against {most} |", "|---:|---:|---:|---:|---:|---:|"]
    for share, t in by.items():
        a, b = t[most], t[most - 1]
        out.append(f"| {share:.2f} | {a['other_cores']:.2f} | {b['other_cores']:.2f} | {a['tokens_per_s']:.1f} | "
                   f"{b['tokens_per_s']:.1f} | {b['tokens_per_s'] / a['tokens_per_s']:.2f}x |")
    return out + ["", f"{rec['max_tokens']} tokens of a chat prompt per run; the thread counts alternate on one "
                      f"loaded model, each row the median of {rec['rounds']} rounds."]


ONE_TOKEN = "one token"  # a record of `python3 -m edgespec.bench.one_token`


def one_token_lines(rec: dict) -> list[str]:
    """Per build: its median ms per token, and its mean time against llama-server's in the same rounds."""
    out = ["| decoding | ms per token (median) | time against llama-server's | 90% interval |", "|---|---:|---:|---:|"]
    for r in rec["rows"]:
        out.append(f"| {r['build']} | {r['ms_per_token']:.2f} | {r['against_server']:.3f} | "
                   f"{r['interval'][0]:.3f}-{r['interval'][1]:.3f} |")
    rounds = rec["rows"][0]["rounds"]
    return out + ["", f"{rec['max_tokens']} greedy tokens after a {rec['prompt_tokens']}-token {rec['category']} prompt, "
                      f"{rec['threads']} threads; each of {rounds} rounds runs every row once, in a random order."]


PROFILE = "profile"  # a record of `edgespec profile --json` (one run, no sweep)


def profile_lines(rec: dict) -> list[str]:
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


MATMUL_NBITS = "matmul nbits"  # a record of `python3 -m edgespec.bench.matmul_nbits`


def matmul_nbits_lines(rec: dict) -> list[str]:
    """ms per call of one 4-bit product per kind of zero point and compute type."""
    return ["| zero points | compute | 1 row, ms | 16 rows, ms |", "|---|---|---:|---:|"] + [
        f"| {r['zero_points']} | {r['compute']} | {r['ms_1_row']:.2f} | {r['ms_16_rows']:.2f} |" for r in rec["rows"]] + [
        "", f"Random weights; onnxruntime {rec['onnxruntime']}, {rec['threads']} threads, each call timed 20 times."]


KINDS = {EXPORTS: lambda rec: VALIDATION_HEADER + [validation_line(r) for r in rec["rows"]],
         SERVER: _server, SWEEP: _sweep, FOOTPRINTS: lambda rec: footprint_lines(rec["rows"]),
         ABLATIONS: ablation_lines, BATCH_CURVES: batch_curve_lines, OTHER_PROGRAMS: other_program_lines,
         MATMUL_NBITS: matmul_nbits_lines, PROFILE: profile_lines,
         ONE_TOKEN: one_token_lines}


def emit(rec: dict, path: Path | None) -> int:
    """A module's record: its table printed, and the record written to `path` if one is given."""
    print("\n".join(KINDS[rec["kind"]](rec)))
    if path:
        path.write_text(json.dumps(rec, indent=2) + "\n")
    return 0


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _full(rows: list[dict]) -> list[str]:
    """Every row, x plain with its interval over the run's prompts where the record has one;
    where rows ran on another device (`gpu:`), its x plain is against that device's plain,
    and each output is compared with that plain's ("same as plain"); a model drafter's row
    gives the time of one of its draft tokens ("drafter ms/step"); under a grammar, edgespec's rows
    give the tokens it forced and its time per verified token."""
    peers = any("x_best_peer" in r for r in rows)
    devices = any(r["drafter"].startswith("gpu:") for r in rows)
    models = any(r.get("drafter_step_ms") is not None for r in rows)
    grammar = any("grammar_ms_per_verified_token" in r for r in rows)
    out = ["| category | method | tok/s | x plain |" + (" x best peer |" if peers else "") + " accepted |"
           + (" same as plain |" if devices else "") + (" drafter ms/step |" if models else "")
           + (" forced tokens | grammar ms/verified token |" if grammar else ""),
           "|---|---|---|---|" + ("---|" if peers else "") + "---|" + ("---|" if devices else "")
           + ("---|" if models else "") + ("---|---|" if grammar else "")]
    for r in rows:
        spread = " ({:.2f}-{:.2f})".format(*r["x_plain_interval"]) if "x_plain_interval" in r else ""
        cells = [r["category"], r["drafter"], _fmt(r.get("tokens_per_s")), _fmt(r.get("ratio_to_plain")) + spread]
        cells += [_fmt(r.get("x_best_peer"))] if peers else []
        cells += [_fmt(r.get("acceptance_rate"), ".0%")]
        cells += [r.get("identical_to_plain") or "-"] if devices else []
        cells += [_fmt(r.get("drafter_step_ms"), ".1f")] if models else []
        cells += [str(r.get("forced_tokens", "-")), _fmt(r.get("grammar_ms_per_verified_token"), ".3f")] \
            if grammar else []
        out.append("| " + " | ".join(cells) + " |")
    return out


def _fpga(rows: list[dict]) -> list[str]:
    """`bench --backend fpga-sim`: speed and energy priced by the board model, acceptance measured."""
    out = ["| category | method | simulated tok/s | simulated x plain | simulated J/token | acceptance (measured) |",
           "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['category']} | {r['method']} | {r['simulated_tokens_per_s']:.2f} | "
                   f"{_fmt(r['simulated_speedup'])} | {_fmt(r['simulated_joules_per_token'], '.3f')} | "
                   f"{_fmt(r['acceptance'], '.0%')} |")
    return out


def _projected(rows: list[dict]) -> list[str]:
    """`bench --device-profile`: speed PROJECTED by each profile's roofline, acceptance measured."""
    out = ["| device profile | category | method | PROJECTED tok/s | PROJECTED x plain | acceptance (measured) |",
           "|---|---|---|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['device_profile']} | {r['category']} | {r['method']} | {r['projected_tokens_per_s']:.1f} | "
                   f"{_fmt(r['projected_speedup'])} | {_fmt(r['acceptance'], '.0%')} |")
    return out


def _headline(rows: list[dict]) -> list[str]:
    """Plain's speed, `auto`'s over it, the best llama-server type's over llama-server's plain,
    and `auto`'s against that type's, each ratio with its paired interval over the prompts."""
    out = ["| | " + " | ".join(_categories(rows)) + " |", "|---|" + "---|" * len(_categories(rows))]
    by = {(r["category"], r["drafter"]): r for r in rows}
    best = {c: max((r for r in rows if r["category"] == c and r["drafter"].startswith("llama-server:")),
                   key=lambda r: r["ratio_to_plain"] or 0, default=None) for c in _categories(rows)}

    def with_interval(ratio: float | None, interval: list | None) -> str:
        return _fmt(ratio) + (" ({:.2f}-{:.2f})".format(*interval) if interval else "")

    def auto_vs_peer(c: str) -> str:
        compared = by[(c, AUTO)].get("against_best_peer")
        return with_interval(compared["ratio"], compared["interval"]) if compared else "-"

    lines = [
        ("plain llama.cpp, tok/s", lambda c: _fmt(by[(c, "plain")]["tokens_per_s"])),
        ("edgespec `auto`, x plain",
         lambda c: with_interval(by[(c, AUTO)]["ratio_to_plain"], by[(c, AUTO)].get("x_plain_interval"))),
        ("best llama-server `--spec-type`, x its plain",
         lambda c: f"{best[c]['drafter'].split(':', 1)[1]} "
                   f"{with_interval(best[c]['ratio_to_plain'], best[c].get('x_plain_interval'))}" if best[c] else "-"),
        ("edgespec `auto` against it", auto_vs_peer),
    ]
    for label, cell in lines:
        out.append(f"| {label} | " + " | ".join(cell(c) for c in _categories(rows)) + " |")
    return out


CURVE_SIZES = (2, 3, 4, 5, 8, 12, 16)


def _curves(rows: list[dict]) -> list[str]:
    """Each runtime's batch-cost curve: one token in ms, and a batch of n tokens in units of
    one token (what a draft of n - 1 tokens costs to verify), and how the bench timed it."""
    out = ["| runtime | 1 token, ms | " + " | ".join(f"{n} tokens" for n in CURVE_SIZES) + " |",
           "|---|---:|" + "---:|" * len(CURVE_SIZES)]
    timings = set()
    for r in rows:
        if r["category"] == "all" and r["drafter"].endswith("plain") and r.get("batch_costs_ms"):
            ms = r["batch_costs_ms"]  # batch sizes 1, 2, ...
            runtime = "llama.cpp" if r["drafter"] == "plain" else r["drafter"].split(":")[0]
            out.append(f"| {runtime} | {ms[0]:.1f} | " + " | ".join(f"{ms[n - 1] / ms[0]:.2f}" if n <= len(ms) else "-"
                                                              for n in CURVE_SIZES) + " |")
            timings.add(r.get("batch_cost_timings"))
    return out + ["", _how_timed(timings)]


def _how_timed(timings: set) -> str:
    """A record without a count predates timing during the run: it timed its curves once, after the runs."""
    n = max((t for t in timings if t), default=1)
    return f"Each size the median of {n} timings, one after each category's prompts." if n > 1 else \
        "Timed once, after the runs."


def _categories(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["category"] for r in rows))


def regenerate(text: str, root: Path) -> str:
    """`text` (a docs page) with every bench table regenerated from the record it names."""
    out, pos = [], 0
    for m in START.finditer(text):
        end = text.index(END, m.end())
        rec = json.loads((root / m.group(1)).read_text())
        out += [text[pos:m.end()], markdown(rec, m.group(2) or "")]
        pos = end
    return "".join(out) + text[pos:]


def main(pages: list[str]) -> int:
    """python -m edgespec.bench.record PAGE.md ...: rewrite their tables in place."""
    if not pages or any(p.startswith("-") for p in pages):
        print("usage: python -m edgespec.bench.record PAGE.md ...  (regenerates the bench tables in each page)")
        return 0 if pages and pages[0] in ("-h", "--help") else 2
    for page in pages:
        p = Path(page)
        try:
            p.write_text(regenerate(p.read_text(), Path(os.getcwd())))
        except (OSError, ValueError) as e:  # a missing page or record, a marker without its end, bad JSON
            print(f"error: {page}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
