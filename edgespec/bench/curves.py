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
from pathlib import Path
from typing import Protocol

import numpy as np
from rich.console import Console

from edgespec.api import EdgeSpec
from edgespec.bench.common import encode_prompt, load_prompts
from edgespec.bench.record import BATCH_CURVES, emit, record
from edgespec.errors import EdgespecError
from edgespec.models.store import resolve
from edgespec.runtimes import open_backend
from edgespec.spec.controller import prior_units
from edgespec.spec.cpu_load import OtherLoad


class _Timed(Protocol):
    def time_curve(self) -> dict[int, float]: ...


class BatchCurves:
    """Curves by the prefix of a runtime's rows ("" for llama.cpp on the CPU, "onnx:", "gpu:")."""

    def __init__(self, engines: dict[str, _Timed]) -> None:
        self.engines = engines
        self.timings: list[dict[str, dict[int, float]]] = []

    def time(self) -> None:
        """Every runtime's curve, once more (seconds by batch size)."""
        self.timings.append({prefix: e.time_curve() for prefix, e in self.engines.items()})

    def medians(self) -> dict[str, dict[int, float]]:
        """Each runtime's median seconds per batch size over the timings so far."""
        out = {}
        for prefix in self.engines:
            curves = [t[prefix] for t in self.timings]
            sizes = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
            out[prefix] = {n: float(np.median([c[n] for c in curves])) for n in sizes}
        return out

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
        return medians


def timed_apart(llm, prompts: list[dict], timings: int, max_tokens: int) -> list[dict]:
    """`timings` curves of `llm`'s plain engine (ms per batch size), each after plain decoding
    of a prompt of the next category in turn, with how long the timing took and the cores
    other processes kept busy meanwhile."""
    by_category: dict[str, list[dict]] = {}
    for row in prompts:
        by_category.setdefault(row["category"], []).append(row)
    turns = [rows[i] for i in range(max(map(len, by_category.values()))) for rows in by_category.values()
             if i < len(rows)]
    rows = []
    for i in range(timings):
        row = turns[i % len(turns)]
        llm.reset()
        list(llm.engine.generate(encode_prompt(row, llm), max_tokens))
        llm.reset()
        load = OtherLoad()
        seconds = llm.engine.calibrate(fresh=True, save=False)
        rows.append({"timing": i + 1, "after": row["category"], "other_cores": load.cores(), "took_s": load.seconds(),
                     "batch_costs_ms": [round(1000 * seconds[n], 3) for n in sorted(seconds)]})
        print(f"timing {i + 1}/{timings}: 1 token {rows[-1]['batch_costs_ms'][0]:.1f} ms", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="A model's batch-cost curve timed several times, each after "
                                             "plain decoding of a shipped prompt, beside the controller's prior.")
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--timings", type=int, default=5)
    ap.add_argument("-n", "--max-tokens", type=int, default=128, help="tokens decoded before each timing")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--json", type=Path, help="write the rows, the machine and the command here")
    args = ap.parse_args(argv)
    try:
        llm = EdgeSpec(open_backend(resolve(args.model), n_ctx=2048, threads=args.threads), drafter="none")
        rows = timed_apart(llm, load_prompts(None), max(args.timings, 1), args.max_tokens)
    except EdgespecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sizes = range(1, len(rows[0]["batch_costs_ms"]) + 1)
    rec = record(rows, args.model, "python3 -m edgespec.bench.curves", kind=BATCH_CURVES,
                 prior_units=[round(prior_units(n), 3) for n in sizes])
    return emit(rec, args.json)


if __name__ == "__main__":
    sys.exit(main())
