"""Decoding beside another program: what the program gets of the cores, as edgespec measures
it (`cpu_load.OtherLoad`), and tokens/s on every thread count against fewer, for programs
that want a growing share of one core. The figures behind `cpu_load.SHARED_READS` and
`GIVE_UP` (docs/design.md).

    python3 -m edgespec.bench.other_programs -m qwen2.5-coder-1.5b \\
        --json docs/bench/other-programs-qwen1.5b-epyc-zen4-2core.json

Each program is busy for its share of every 10 ms and sleeps the rest. For each share the
thread counts alternate, `--rounds` times, on one loaded model, so each pair is measured
side by side; a row keeps the medians.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from edgespec.api import EdgeSpec
from edgespec.bench.common import encode_prompt, load_prompts
from edgespec.bench.record import OTHER_PROGRAMS, emit, record
from edgespec.drafters import PLAIN
from edgespec.errors import EdgespecError
from edgespec.speculative.cpu_load import OtherLoad

SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
BUSY = """
import sys, time
share = float(sys.argv[1])
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < share * 0.01:
        pass
    time.sleep((1 - share) * 0.01)
"""


@contextmanager
def busy_program(share: float) -> Iterator[None]:
    """A program that wants `share` of one core while the block runs (none for 0)."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY, str(share)]) if share > 0 else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def decode_beside(llm: EdgeSpec, ids: list[int], threads: int, max_tokens: int) -> tuple[float, float | None]:
    """Tokens/s decoding `ids` on `threads` threads, and the cores others kept busy meanwhile."""
    llm.backend.set_threads(threads)
    llm.reset()
    load = OtherLoad()
    list(llm.engine.generate(ids, max_tokens))
    return llm.last_stats.tokens_per_s, load.cores()


def measure(llm: EdgeSpec, ids: list[int], most: int, max_tokens: int, rounds: int) -> list[dict]:
    """A row per share and thread count (`most` and `most - 1`): medians over `rounds`."""
    rows = []
    for share in SHARES:
        runs: dict[int, list[tuple[float, float]]] = {most: [], most - 1: []}
        with busy_program(share):
            for _ in range(rounds):
                for threads in runs:
                    speed, cores = decode_beside(llm, ids, threads, max_tokens)
                    runs[threads].append((speed, cores or 0.0))
        for threads, got in runs.items():
            rows.append({"wants": share, "threads": threads, "tokens_per_s": round(float(np.median([s for s, _ in got])), 2),
                         "other_cores": round(float(np.median([c for _, c in got])), 3)})
        print(f"a program wanting {share:.2f} of a core: " + ", ".join(
            f"{r['threads']} threads {r['tokens_per_s']} tok/s beside {r['other_cores']} cores" for r in rows[-2:]),
            file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=2, help="the most threads; each share also runs on one fewer")
    ap.add_argument("-n", "--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the rows, the machine and the command here")
    args = ap.parse_args(argv)
    if args.threads < 2:
        ap.error("--threads must be at least 2: each share runs on it and on one fewer")
    try:
        llm = EdgeSpec(args.model, drafter=PLAIN, threads=args.threads, n_ctx=2048)
        prompt = next(p for p in load_prompts(None) if p["category"] == "chat")
        rows = measure(llm, encode_prompt(prompt, llm), args.threads, args.max_tokens, args.rounds)
    except EdgespecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rec = record(rows, args.model, "python3 -m edgespec.bench.other_programs", kind=OTHER_PROGRAMS,
                 max_tokens=args.max_tokens, rounds=args.rounds)
    return emit(rec, args.json)


def table(rec: dict) -> list[str]:
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


if __name__ == "__main__":
    sys.exit(main())
