"""The batch-cost curves a bench prices its oracle and replay rows at, timed during the run.

One timing of a curve is one moment's: on the 2-core machines here a batch's cost in units
of one token can be a quarter off at another moment of the same hour (docs/design.md), and
the oracle bound moves with it. So each runtime's curve is timed after every category's last
prompt, and each batch size is priced at the median of its timings: the curve of the whole
run, not of its last half minute. The timing runs on the runtime's plain engine, which drafts nothing,
so re-timing its curve changes no method's decoding.

How far one timing is from the next, and where the prior the controller prices an unmeasured
size at sits against them, is a record of its own (`batch curves`): the curve timed several
times, each after plain decoding of a shipped prompt, as a bench times it.

    python3 -m edgespec.bench.curves -m qwen2.5-coder-1.5b --timings 5 \\
        --json docs/bench/curves-epyc-zen4-2core.json
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Protocol

import numpy as np
from rich.console import Console

from edgespec.api import EdgeSpec
from edgespec.bench.common import encode_prompt, load_prompts
from edgespec.bench.hybrid_compare import rounds_ratio
from edgespec.bench.record import BATCH_CURVES, emit, record
from edgespec.drafters import PLAIN
from edgespec.errors import EdgespecError
from edgespec.models.store import resolve
from edgespec.runtimes import open_backend
from edgespec.runtimes.llamacpp import SMALL_BATCH_SWITCH, llama_cpp_kernels_only, small_batch_kernels
from edgespec.speculative.cost_curve import prior_units
from edgespec.speculative.cpu_load import OtherLoad


ONE_TOKEN_PAIRS = 20  # a timing's one-token evaluations with the kernels on and off, paired


class _Timed(Protocol):
    def time_curve(self, small_batch: bool = True) -> dict[int, float]: ...


def _median_curve(curves: list[dict[int, float]]) -> dict[int, float]:
    sizes = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    return {n: float(np.median([c[n] for c in curves])) for n in sizes}


class BatchCurves:
    """Curves by the prefix of a runtime's rows ("" for llama.cpp on the CPU, "onnx:", "gpu:").
    With `kernels_off`, llama.cpp's CPU curve is also timed each time with its own kernels for
    small batches instead of edgespec's (runtimes/patches), so both builds' curves are one run's."""

    def __init__(self, engines: dict[str, _Timed], kernels_off: bool = False) -> None:
        self.engines = engines
        self.timings: list[dict[str, dict[int, float]]] = []
        self.kernels_off = kernels_off and "" in engines
        self.off_timings: list[dict[int, float]] = []

    def time(self) -> None:
        """Every runtime's curve, once more (seconds by batch size)."""
        self.timings.append({prefix: e.time_curve() for prefix, e in self.engines.items()})
        if self.kernels_off:
            self.off_timings.append(self.engines[""].time_curve(small_batch=False))

    def medians(self) -> dict[str, dict[int, float]]:
        """Each runtime's median seconds per batch size over the timings so far."""
        return {prefix: _median_curve([t[prefix] for t in self.timings]) for prefix in self.engines}

    def medians_off(self) -> dict[int, float]:
        """llama.cpp's CPU curve on its own small-batch kernels (empty unless timed)."""
        return _median_curve(self.off_timings)

    def print(self, console: Console) -> dict[str, dict[int, float]]:
        """Says each median curve, in units of one token, with how far two tokens moved between timings."""
        medians = self.medians()
        for prefix, cost in medians.items():
            if not cost:
                continue
            twos = [t[prefix][2] / t[prefix][1] for t in self.timings if 2 in t[prefix]]
            spread = f"; 2 tokens {min(twos):.2f}-{max(twos):.2f} across timings" if len(twos) > 1 else ""
            label = prefix.removesuffix(":") + " " if prefix else ""
            count = f"{len(self.timings)} timing" + "s" * (len(self.timings) > 1)
            units = ", ".join(f"{n}: {t / cost[1]:.2f}" for n, t in cost.items())
            console.print(f"{label}batch cost timed after each category ({count}, median per size), in units of one "
                          f"token: {units}{spread}", highlight=False)
        off = self.medians_off()
        if off and medians.get(""):
            units = ", ".join(f"{n}: {t / off[1]:.2f}" for n, t in off.items())
            console.print(f"the same with llama.cpp's own small-batch kernels ({SMALL_BATCH_SWITCH}=0): {units}; "
                          f"one token {medians[''][1] / off[1]:.3f}x their time", highlight=False)
        return medians


def timed_apart(llm, prompts: list[dict], timings: int, max_tokens: int, kernels_off: bool = False,
                other_build=None) -> list[dict]:
    """`timings` curves of `llm`'s plain engine (ms per batch size), each after plain decoding
    of a prompt of the next category in turn, with how long the timing took and the cores
    other processes kept busy meanwhile. With `kernels_off`, each timing also times the curve
    on llama.cpp's own small-batch kernels; with `other_build` (a bench worker on another
    llama.cpp build), that build's curve too, right after."""
    by_category: dict[str, list[dict]] = {}
    for row in prompts:
        by_category.setdefault(row["category"], []).append(row)
    turns = [rows[i] for i in range(max(map(len, by_category.values()))) for rows in by_category.values()
             if i < len(rows)]
    ms = lambda seconds: [round(1000 * seconds[n], 3) for n in sorted(seconds)]  # noqa: E731
    rows = []
    for i in range(timings):
        row = turns[i % len(turns)]
        llm.reset()
        list(llm.engine.generate(encode_prompt(row, llm), max_tokens))
        llm.reset()
        load = OtherLoad()
        seconds = llm.engine.calibrate(fresh=True, save=False)
        rows.append({"timing": i + 1, "after": row["category"], "other_cores": load.cores(), "took_s": load.seconds(),
                     "batch_costs_ms": ms(seconds)})
        if kernels_off:
            with llama_cpp_kernels_only():
                rows[-1]["batch_costs_kernels_off_ms"] = ms(llm.engine.calibrate(fresh=True, save=False))
            rows[-1]["one_token_on_off_ms"] = one_token_on_off(llm.engine.backend, ONE_TOKEN_PAIRS, i)
        if other_build is not None:
            rows[-1]["batch_costs_other_build_ms"] = ms(other_build.time_curve())
        print(f"timing {i + 1}/{timings}: 1 token {rows[-1]['batch_costs_ms'][0]:.1f} ms", file=sys.stderr, flush=True)
    return rows


def one_token_on_off(backend, pairs: int, seed: int) -> list[list[float]]:
    """`pairs` evaluations of one token with the small-batch kernels on and with them off, in
    a random order each round ([on, off] ms). One token's time drifts between timings by more
    than the 1% the switch could cost it; paired round by round, the drift cancels."""
    rng, base, filler = np.random.default_rng(seed), backend.n_past, backend.tokenizer.bos_id or 0
    out = []
    for _ in range(pairs):
        ms = {}
        for on in rng.permutation([True, False]):
            with nullcontext() if on else llama_cpp_kernels_only():
                start = time.perf_counter()
                backend.eval([filler])
                ms[bool(on)] = round(1000 * (time.perf_counter() - start), 3)
            backend.rollback(base)
        out.append([ms[True], ms[False]])
    return out


def one_token_speed(pairs: list[list[float]], seed: int = 0) -> tuple[float, list[float]]:
    """One token's speed with the kernels on against off over the pairs (their times' ratio,
    off over on), and its INTERVAL when the pairs are resampled."""
    p = np.asarray(pairs)
    return rounds_ratio(p[:, 1], p[:, 0], seed)


def _other_build(lib_dir: Path, model: Path, threads: int | None):
    """A process of its own on the llama.cpp libraries in `lib_dir` (llama-cpp-python loads
    LLAMA_CPP_LIB_PATH's), to time that build's curve beside this one's."""
    from edgespec.bench.worker import MethodSpec, Worker
    from edgespec.runtimes.llamacpp import default_threads, environ

    with environ("LLAMA_CPP_LIB_PATH", str(lib_dir)):
        return Worker(f"llama.cpp in {lib_dir}", MethodSpec(str(model), ctx=2048, threads=threads or default_threads()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="A model's batch-cost curve timed several times, each after "
                                             "plain decoding of a shipped prompt, beside the controller's prior.")
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--timings", type=int, default=5)
    ap.add_argument("-n", "--max-tokens", type=int, default=128, help="tokens decoded before each timing")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--other-build", type=Path, metavar="LIB_DIR",
                    help="also time the curve on the llama.cpp libraries in this folder (another build), each timing")
    ap.add_argument("--json", type=Path, help="write the rows, the machine and the command here")
    args = ap.parse_args(argv)
    other = None
    try:
        path = resolve(args.model)
        llm = EdgeSpec(open_backend(path, n_ctx=2048, threads=args.threads), drafter=PLAIN)
        if args.other_build:
            other = _other_build(args.other_build, path, args.threads)
        rows = timed_apart(llm, load_prompts(None), max(args.timings, 1), args.max_tokens,
                           kernels_off=small_batch_kernels(), other_build=other)
    except EdgespecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if other is not None:
            other.close()
    sizes = range(1, len(rows[0]["batch_costs_ms"]) + 1)
    rec = record(rows, args.model, "python3 -m edgespec.bench.curves", kind=BATCH_CURVES,
                 prior_units=[round(prior_units(n), 3) for n in sizes],
                 other_build=str(args.other_build) if args.other_build else None)
    return emit(rec, args.json)


def table(rec: dict) -> list[str]:
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
    out += ["", "Medians over the timings, each build's sizes in units of its own one token."]
    if all("one_token_on_off_ms" in r for r in rec["rows"]):
        pairs = [p for r in rec["rows"] for p in r["one_token_on_off_ms"]]
        speed, (lo, hi) = one_token_speed(pairs)
        out.append(f"One token with the small-batch kernels on and off, {len(pairs)} pairs in a random order each "
                   f"(every timing's): on at {speed:.3f}x the speed of off ({lo:.3f}-{hi:.3f}).")
    return out


if __name__ == "__main__":
    sys.exit(main())
