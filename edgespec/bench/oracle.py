"""An upper bound for prompt lookup on a given machine: replay plain greedy output
with a controller that knows in advance how many of each proposal's tokens the
target will accept, and verifies the most cost-effective number of them.

Greedy verification is deterministic, so the plain output decides acceptance
exactly; the cost of each step is the measured cost of a batch of that size.
Each step's choice is the best for that step alone: a controller that gives up
tokens now for a cheaper batch later can edge past it where the cost curve is not
monotone, but not by much, so when the bound misses a goal clearly, the goal is out
of reach of this drafter on this machine (only another source of drafts or cheaper
batches can get there).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from edgespec.drafters.lookup import PromptLookupDrafter


def lookup_oracle_time(prompt: Sequence[int], output: Sequence[int], costs: np.ndarray, max_k: int = 16) -> float:
    """Seconds (in the units of `costs[n]`, a batch of n tokens) that an oracle
    controller over prompt lookup needs for `output` after its first token."""
    d = PromptLookupDrafter()
    prompt, output = list(prompt), list(output)
    d.begin(prompt)
    hist = prompt + output[:1]
    t = 0.0
    while len(hist) - len(prompt) < len(output):
        rest = output[len(hist) - len(prompt):]
        cap = min(max_k, len(rest) - 1, len(costs) - 2)
        toks = d.propose(hist, cap).tokens if cap > 0 else []
        m = 0
        while m < len(toks) and toks[m] == rest[m]:
            m += 1
        k = min(range(m + 1), key=lambda j: costs[j + 1] / (j + 1))  # tokens per second, best of what will verify
        t += costs[k + 1]
        hist.extend(rest[: k + 1])
    return t


def oracle_times(encoded: Sequence[tuple[str, list[int]]], plain_runs: Mapping[str, Sequence],
                 costs: Sequence[float]) -> dict[str, list[float]]:
    """[plain, oracle] seconds per category (and "all") of a bench: each prompt's plain output
    (`plain_runs` by category, in prompt order) replayed once at `costs`."""
    oracle: dict[str, list[float]] = {}
    for cat, runs in plain_runs.items():
        ids_of = [ids for c, ids in encoded if c == cat]
        t = oracle.setdefault(cat, [0.0, 0.0])
        for ids, r in zip(ids_of, runs):
            t[0] += max(len(r.tokens) - 1, 0) * costs[1]
            t[1] += lookup_oracle_time(ids, r.tokens, costs)
    oracle["all"] = [sum(t[0] for t in oracle.values()), sum(t[1] for t in oracle.values())]
    return oracle
