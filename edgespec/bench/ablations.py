"""What each rule of prompt lookup and of the draft controller is worth: plain decoding's
texts replayed (replay.py) by `lookup` with every rule, then with one rule taken out at a
time, all at one batch-cost curve, in three machine states: a first run (nothing timed or
stored: the curve is learned from the replay's own batches), a fresh machine (the curve
known, no acceptance rates) and one that stored the rates of a first pass. A replay writes
plain's text and is charged the curve's price for each batch, so timing noise is out and
the differences are the rules'.

    python3 -m edgespec.bench.ablations -m qwen2.5-coder-1.5b --prompts all \\
        --curve docs/bench/epyc-zen3-2core.json --json docs/bench/ablations-epyc-zen3-2core.json

`--curve` prices batches at a bench record's curve (its plain row's `batch_costs_ms`),
so the figures sit beside that record's; without it the curve is timed here. A rule is
taken out by patching the one function or constant that applies it, for the replay
only (`RULES`); each rule's reason is where it is applied.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Callable
from unittest.mock import patch

import numpy as np

from edgespec.api import EdgeSpec
from edgespec.bench.common import encode_prompt, load_prompts
from edgespec.bench.record import ABLATIONS, categories, emit, fmt_cell, record
from edgespec.bench.replay import priced, replay
from edgespec.drafters import PLAIN
from edgespec.drafters.lookup import CopyBreaks, PromptLookupDrafter
from edgespec.errors import EdgespecError
from edgespec.models.store import resolve
from edgespec.runtimes import open_backend
from edgespec.speculative.backend import Tokenizer
from edgespec.speculative.acceptance import AcceptanceModel
from edgespec.speculative.controller import DRAFT_MARGIN, DraftController
from edgespec.speculative.drafter import Draft
from edgespec.speculative.engine import Engine

DRAFTER = PromptLookupDrafter.name
MAX_DRAFT = 16


def _without_hindsight() -> AbstractContextManager:
    begin = Engine._begin_drafter

    def begin_without(self, *args):
        begin(self, *args)
        return None  # as in sampled decoding: declined kinds are probed instead

    return patch.object(Engine, "_begin_drafter", begin_without)


def _kinds_without(*tags: str) -> Callable[[], AbstractContextManager]:
    """Lookup's proposals as they are, their kinds no longer split by `tags`."""
    def taken_out() -> AbstractContextManager:
        propose = PromptLookupDrafter.propose

        def merged(self, history, k):
            d = propose(self, history, k)
            kind = d.kind.without(*tags)
            return d if kind == d.kind else Draft(d.tokens, kind, d.probs)

        return patch.object(PromptLookupDrafter, "propose", merged)
    return taken_out


# name -> (what the rule does, a context in which it is taken out)
RULES: dict[str, tuple[str, Callable[[], AbstractContextManager]]] = {
    "hindsight": ("declined drafts and cut-off tails learned from the text that followed",
                  _without_hindsight),
    "evidence per prompt": ("each prompt's acceptance starts from the long-run rate",
                            lambda: patch.object(AcceptanceModel, "new_context", lambda self: None)),
    "draft margin": (f"a draft must be predicted to beat plain decoding by {DRAFT_MARGIN:.0%}",
                     lambda: patch("edgespec.speculative.controller.DRAFT_MARGIN", 0.0)),
    "end cut": ("a draft ends at its first end-of-generation token",
                lambda: patch.object(Draft, "through_end", lambda self, is_eog: self)),
    "copy breaks": ("a copy stops before a token where this prompt's copies kept breaking",
                    lambda: patch.object(CopyBreaks, "safe_length", lambda self, copy: len(copy))),
    "prompt key": ("copies from the prompt learned apart (`/p`)", _kinds_without("p")),
    "match keys": ("ambiguous and continued matches learned apart (`/a`, `/c`)", _kinds_without("a", "c")),
    "unmeasured sizes tried": ("a batch size not timed yet is tried where it would pay at the cheapest rows",
                               lambda: patch.object(DraftController, "_size_to_learn", lambda self, *a: 0)),
}
LEARNING_ONLY = {"unmeasured sizes tried"}  # acts only while the curve is being learned


def plain_texts(model: str, prompts: list[dict], max_tokens: int, ctx: int, threads: int | None
                ) -> tuple[EdgeSpec, list[tuple[str, list[int], list[int]]]]:
    """The model's plain greedy answer to each prompt: (category, prompt ids, answer ids)."""
    llm = EdgeSpec(open_backend(resolve(model), n_ctx=ctx, threads=threads), drafter=PLAIN, n_ctx=ctx)
    texts = []
    for i, row in enumerate(prompts, 1):
        ids = encode_prompt(row, llm)
        llm.reset()
        texts.append((row["category"], ids, list(llm.engine.generate(ids, max_tokens))))
        print(f"plain {i}/{len(prompts)}: {row['category']}, {len(texts[-1][2])} tokens", file=sys.stderr, flush=True)
    return llm, texts


def curve_of(record_path: Path) -> dict[int, float]:
    """Seconds per batch size from a bench record: its plain row's `batch_costs_ms`."""
    try:
        rows = json.loads(record_path.read_text())["rows"]
        ms = next(r["batch_costs_ms"] for r in rows if r["drafter"] == "plain" and r.get("batch_costs_ms"))
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        raise EdgespecError(f"{record_path}: not a bench record with a plain row's batch_costs_ms") from None
    return {n: v / 1000 for n, v in enumerate(ms, 1)}


def ablate(tokenizer: Tokenizer, texts: list[tuple[str, list[int], list[int]]], costs: np.ndarray) -> list[dict]:
    """A row per rule taken out (first: none), machine and category, from replays of `texts`
    ((category, prompt ids, plain's answer)) priced at `costs` (seconds per batch size): on a
    first run, which learns the curve as it goes; on a fresh machine, which knows it; then on
    one that also stored the acceptance rates of a first pass over the same texts with every
    rule in place, as a machine does between processes."""
    stored: dict = {}
    replay(tokenizer, texts, DRAFTER, costs, MAX_DRAFT, learned=stored)
    rows = []
    for machine, seed, curve_known in (("first run", None, False), ("fresh", None, True),
                                       ("rates stored", stored, True)):
        for rule, (does, taken_out) in {"none": ("every rule in place", nullcontext), **RULES}.items():
            if curve_known and rule in LEARNING_ONLY:
                continue
            with taken_out():
                totals = replay(tokenizer, texts, DRAFTER, costs, MAX_DRAFT, seed, curve_known=curve_known)
            for cat in [*(c for c in totals if c != "all"), "all"]:
                plain_s, replay_s, drafted, accepted = totals[cat]
                rows.append({"machine": machine, "taken_out": rule, "rule": does, "category": cat,
                             "ratio_to_plain": round(plain_s / replay_s, 3), "drafted": drafted, "accepted": accepted})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--prompts", default="all", help="a JSONL file, or a shipped set: shipped, heldout, all")
    ap.add_argument("-n", "--max-tokens", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--curve", type=Path, help="price batches at this bench record's curve instead of timing one")
    ap.add_argument("--json", type=Path, help="write the rows, the curve, the machine and the command here")
    args = ap.parse_args(argv)
    try:
        curve = curve_of(args.curve) if args.curve else None
        llm, texts = plain_texts(args.model, load_prompts(Path(args.prompts)), args.max_tokens, args.ctx, args.threads)
        if curve is None:
            llm.reset()
            curve = llm.engine.calibrate(fresh=True, save=False)
        rows = ablate(llm.tokenizer, texts, priced(llm, curve))
    except EdgespecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rec = record(rows, args.model, "python3 -m edgespec.bench.ablations", kind=ABLATIONS, drafter=DRAFTER,
                 batch_costs_ms=[round(1000 * curve[n], 3) for n in sorted(curve)])
    return emit(rec, args.json)


def table(rec: dict) -> list[str]:
    """x plain per category with every rule, then with each rule taken out, per machine state
    (first run, fresh, or with stored rates); the curve priced at."""
    cats = categories(rec["rows"])
    out = ["| machine | taken out | the rule | " + " | ".join(cats) + " |", "|---|---|---|" + "---:|" * len(cats)]
    by: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rec["rows"]:
        by.setdefault((r["machine"], r["taken_out"]), {})[r["category"]] = r
    for (machine, name), cells in by.items():
        rule = next(iter(cells.values()))["rule"]
        out.append(f"| {machine} | {name} | {rule} | "
                   + " | ".join(fmt_cell(cells[c]["ratio_to_plain"], ".3f") for c in cats) + " |")
    ms = rec["batch_costs_ms"]
    sizes = [n for n in (2, 4, 8, 16) if n <= len(ms)]
    return out + ["", f"`{rec['drafter']}` replayed on plain's texts, x plain; batches priced at one token "
                      f"{ms[0]:.1f} ms, " + ", ".join(f"{n} tokens {ms[n - 1] / ms[0]:.2f}x" for n in sizes) + "."]


if __name__ == "__main__":
    sys.exit(main())
