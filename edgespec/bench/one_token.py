"""One token's decoding: edgespec's plain engine on this build (and on other builds of
llama.cpp, `--other-build`) beside llama-server's plain decoding, paired round by round.

Each contestant is a process of its own with the model loaded; every round runs each once,
in a fresh random order, on the same prompt and the same number of greedy tokens, timed
from the first token to the last (llama-server's own clock over the same span). One token's
time drifts by a fifth within minutes on the 2-core machines here, so a row keeps the mean
ratio of its rounds to llama-server's in the same rounds, with a paired bootstrap interval.

    python3 -m edgespec.bench.one_token -m qwen2.5-coder-1.5b --rounds 40 \\
        --other-build "without the patches=/tmp/k/unpatched/lib" --json docs/bench/one-token-epyc-zen4-2core.json
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from edgespec.bench.common import encode_prompt, load_prompts
from edgespec.bench.hybrid_compare import rounds_ratio
from edgespec.bench.record import ONE_TOKEN, emit, record
from edgespec.errors import EdgespecError

PROMPT_TOKENS = 200  # a shipped prompt of the category asked for, cut to at most this
SERVER = "llama-server"


def serve(model: str, threads: int, ctx: int, n: int) -> None:
    """A contestant: on each line of stdin (the prompt's ids), ms per token of `n` greedy
    tokens decoded by edgespec's plain engine, first token to last."""
    from edgespec.api import EdgeSpec
    from edgespec.drafters import PLAIN

    llm = EdgeSpec(model, drafter=PLAIN, threads=threads, n_ctx=ctx)
    print("ready", flush=True)
    for line in sys.stdin:
        llm.reset()
        stamps = [time.perf_counter() for _ in llm.engine.generate([int(t) for t in line.split()], n)]
        print(1000 * (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1), flush=True)


class _Engine:
    """edgespec's plain engine in a child process, on the llama.cpp libraries in `lib` (None: this build's)."""

    def __init__(self, model: str, threads: int, ctx: int, n: int, lib: str | None) -> None:
        self.where = lib or "this build"
        env = {**os.environ, **({"LLAMA_CPP_LIB_PATH": lib} if lib else {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "edgespec.bench.one_token", "--serve", "-m", model,
                                      "--threads", str(threads), "--ctx", str(ctx), "-n", str(n)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        if self.proc.stdout.readline().strip() != "ready":
            raise EdgespecError(f"edgespec did not start on the libraries in {self.where}")

    def ms_per_token(self, ids: list[int]) -> float:
        try:
            self.proc.stdin.write(" ".join(map(str, ids)) + "\n")
            self.proc.stdin.flush()
            return float(self.proc.stdout.readline())
        except (OSError, ValueError):  # the child died: its pipe broke, or it answered nothing
            raise EdgespecError(f"edgespec on {self.where} stopped (exit code {self.proc.poll()})") from None

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:  # already broken: the child is gone
            pass
        self.proc.wait()


class _Server:
    """llama-server's plain decoding, as the bench's peer runs it."""

    def __init__(self, model: Path, threads: int, ctx: int, n: int) -> None:
        from edgespec.bench import llama_server

        exe = llama_server.binary()
        if exe is None:
            raise EdgespecError("no llama-server is built on this machine (./install.sh --dev builds it)")
        self.server = llama_server.LlamaServer(exe, model, ctx, threads, [], False)
        self.n = n

    def ms_per_token(self, ids: list[int]) -> float:
        t = self.server.complete(ids, self.n)["timings"]  # its first token to its last, as the engine's
        return float(t["predicted_ms"]) / max(1, int(t["predicted_n"]) - 1)

    def close(self) -> None:
        self.server.close()


def rows_of(times: dict[str, list[float]], seed: int = 0) -> list[dict]:
    """Per contestant: its median ms per token, and its mean time over llama-server's in the same
    rounds with the INTERVAL of that ratio when the rounds are resampled."""
    rows = []
    for name, ms in times.items():
        against, interval = rounds_ratio(ms, times[SERVER], seed)
        rows.append({"build": name, "ms_per_token": round(float(np.median(ms)), 2),
                     "against_server": against, "interval": interval, "rounds": len(ms)})
    return rows


def measure(contestants: dict, ids: list[int], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in contestants}
    order = list(contestants)
    for i in range(rounds):
        random.Random(i).shuffle(order)
        for name in order:
            times[name].append(contestants[name].ms_per_token(ids))
        print(f"round {i + 1}/{rounds}: " + ", ".join(f"{n} {t[-1]:.1f} ms" for n, t in times.items()),
              file=sys.stderr, flush=True)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("-n", "--max-tokens", type=int, default=64, help="greedy tokens a round, after the prompt")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--category", default="summarize", help="the shipped prompt set's first prompt of this category")
    ap.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS, help="cut the prompt to this many tokens")
    ap.add_argument("--other-build", action="append", default=[], metavar="[LABEL=]LIB_DIR",
                    help="also time edgespec on the llama.cpp libraries in this folder, its row named LABEL "
                         "(repeatable)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="write the rows, the machine and the command here")
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.model, args.threads, args.ctx, args.max_tokens)
        return 0
    contestants: dict = {}
    try:
        from edgespec.api import EdgeSpec
        from edgespec.drafters import PLAIN
        from edgespec.models.store import model_file, resolve

        host = EdgeSpec(args.model, drafter=PLAIN, threads=1, n_ctx=args.ctx)
        prompt = next((p for p in load_prompts(None) if p["category"] == args.category), None)
        if prompt is None:
            raise EdgespecError(f"the shipped prompts have no category {args.category!r}")
        ids = encode_prompt(prompt, host)[:args.prompt_tokens]
        host.close()
        contestants["this build"] = _Engine(args.model, args.threads, args.ctx, args.max_tokens, None)
        for other in args.other_build:
            label, _, lib = other.rpartition("=")
            contestants[label or lib] = _Engine(args.model, args.threads, args.ctx, args.max_tokens, lib)
        contestants[SERVER] = _Server(model_file(resolve(args.model)), args.threads, args.ctx, args.max_tokens)
        times = measure(contestants, ids, args.rounds)
    except EdgespecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        for c in contestants.values():
            c.close()
    rec = record(rows_of(times), args.model, "python3 -m edgespec.bench.one_token", kind=ONE_TOKEN,
                 max_tokens=args.max_tokens, prompt_tokens=len(ids), threads=args.threads, category=args.category)
    return emit(rec, args.json)


def table(rec: dict) -> list[str]:
    """Per build: its median ms per token, and its mean time against llama-server's in the same rounds."""
    out = ["| decoding | ms per token (median) | time against llama-server's | 90% interval |", "|---|---:|---:|---:|"]
    for r in rec["rows"]:
        out.append(f"| {r['build']} | {r['ms_per_token']:.2f} | {r['against_server']:.3f} | "
                   f"{r['interval'][0]:.3f}-{r['interval'][1]:.3f} |")
    rounds = rec["rows"][0]["rounds"]
    return out + ["", f"{rec['max_tokens']} greedy tokens after a {rec['prompt_tokens']}-token {rec['category']} "
                      f"prompt, {rec['threads']} threads; each of {rounds} rounds runs every row once, in a random "
                      "order."]


if __name__ == "__main__":
    sys.exit(main())
