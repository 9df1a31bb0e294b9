"""A small model of the target's vocabulary drafts greedily on its own KV cache.

As in llama.cpp's speculative example: the drafter's cache follows the accepted
history (rolled back to the common prefix each step), and drafting stops early
when its top token's probability falls below `p_min`, because an unsure draft
token is likely rejected and every drafted token costs a drafter step.

VocabTrim'd drafters (see export/vocabtrim.py) return logits for K kept tokens:
`backend.vocab_map[row]` is the target id of logits row `row`. Its backend takes
target ids (a trimmed GGUF reads their rows from its full input embedding); only
a GGUF trimmed before that existed takes trimmed ids, so target ids are mapped in.
Greedy drafts are the argmax. In sampling mode drafts are drawn from the
drafter's own distribution (the same temperature, top-k and top-p as the target)
and returned with it, so rejection sampling accepts a token with probability
min(1, p/q) instead of p. Every decision to stop drafting is made before the
next draw, so a proposed token is always distributed as the q returned with it.

An idle drafter (one the controller only probes now and then) would have to
read everything said since it last drafted before it can draft again: a tenth of
the decoding time for a drafter ten times smaller, whether the probe pays or not. So a catch-up longer than `window`
tokens starts a fresh cache instead: the history's first `sink` tokens (BOS and
the chat template's head, which attention leans on) and its last `window`. The
same keeps a history longer than the drafter's context draftable. Drafts are
verified as always, so a shorter context costs acceptance, never correctness.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from edgespec.runtimes.vocab_map import input_table, map_inputs
from edgespec.speculative.backend import Backend
from edgespec.speculative.drafter import EMPTY, Draft, Drafter, Kind, ModelCost, Sampling
from edgespec.speculative.sequence import common_prefix
from edgespec.speculative.verifier import draw, target_probs


MODEL = Kind("model")


class ModelDrafter(Drafter):
    name = "model"

    def __init__(self, backend: Backend, max_draft: int = 8, p_min: float = 0.5, window: int | None = 64,
                 sink: int = 4, kind: Kind = MODEL) -> None:
        """`kind`: what its drafts are learned as (a cross-vocabulary drafter's model drafts
        another kind)."""
        self.backend = backend
        self.cost = ModelCost(kind, backend, window)
        self.max_draft = max_draft
        self.p_min = p_min
        self.window = window  # None: always read the whole history
        self.sink = sink
        self._skip = 0  # history[sink : sink + _skip] is not in the drafter's cache (see _seen)
        self.restarts = 0  # catch-ups cut to the window
        self.vocab_map: np.ndarray | None = backend.vocab_map
        self._to_input: np.ndarray | None = None
        if self.vocab_map is not None and backend.inputs_trimmed:
            self._to_input = input_table(self.vocab_map)
        # in sampling mode, the target id a drawn logits row proposes (-1: none);
        # None is the drafter's own ids (mapped through vocab_map when trimmed)
        self.sampled_map: np.ndarray | None = None
        self.sampling: Sampling = None  # this generation's draws (begin): None, greedy
        self._proposing: tuple[np.ndarray, np.ndarray, np.ndarray, int] | None = None  # see _proposable
        self._cached: list[int] = []  # target ids whose KV the drafter holds

    @property
    def target_vocab(self) -> int:
        """How many target ids the drafter can name (its full vocabulary, before trimming)."""
        if self.vocab_map is not None:
            return int(self.vocab_map.max()) + 1
        return self.backend.n_vocab

    def _inputs(self, ids: Sequence[int]) -> list[int]:
        if self._to_input is None:
            return list(ids)
        return map_inputs(ids, self._to_input, len(self.vocab_map))

    def _eval(self, ids: Sequence[int]) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.backend.eval(self._inputs(ids), n_logits=1)[0]
        dt = time.perf_counter() - t0
        c = self.cost
        c.eval_s += dt
        if len(ids) > self.max_draft + 1:
            c.read = (c.read[0] + len(ids), c.read[1] + dt)
        return out

    def _cut(self, history: Sequence[int], skip: int) -> list[int]:
        """`history` without the `skip` tokens after its first `sink`."""
        return list(history) if not skip else [*history[: self.sink], *history[self.sink + skip :]]

    def _seen(self, history: Sequence[int], k: int, idle: bool) -> tuple[list[int], int]:
        """The history as the drafter's cache holds it or is to hold it before drafting
        k tokens, and how much of that the cache already holds: whole, or its first
        `sink` and last `window` tokens when it no longer fits the drafter's context or
        (`idle`) when catching up would read more than `window` new tokens."""
        seen = self._cut(history, self._skip)
        keep = common_prefix(self._cached, seen)
        window = min(self.window or 0, self.backend.n_ctx - self.sink - self.max_draft)
        if window <= 0 or len(history) <= self.sink + window:
            return seen, keep
        overflow = len(seen) + k > self.backend.n_ctx
        if overflow or (idle and len(seen) - keep > window):
            self._skip = len(history) - self.sink - window
            self.restarts += 1
            seen = self._cut(history, self._skip)
            return seen, common_prefix(self._cached, seen)
        return seen, keep

    def begin(self, history: Sequence[int], sampling: Sampling = None) -> None:
        self.sampling = sampling
        # the prompt is read whole now (prompt processing), so the first step pays only
        # for drafting; only one longer than the drafter's context (another vocabulary
        # may spell it in more tokens) is cut to the window
        if self._skip:  # the cache holds a cut history: keep the cut only if this one extends it
            extends = (len(history) > self.sink + self._skip
                       and common_prefix(self._cached, self._cut(history, self._skip)) > self.sink)
            self._skip = self._skip if extends else 0
        seen, keep = self._seen(history, self.max_draft, idle=False)
        keep = min(keep, len(seen) - 1)  # the prompt's last token is fed by the first proposal
        self.backend.rollback(keep)
        self._cached = self._cached[:keep]
        if keep < len(seen) - 1 and len(seen) + self.max_draft <= self.backend.n_ctx:
            self._eval(seen[keep:-1])
            self._cached = seen[:-1]

    def propose(self, history: Sequence[int], k: int) -> Draft:
        k = min(k, self.max_draft)
        if k <= 0:
            return EMPTY
        seen, keep = self._seen(history, k, idle=True)
        if len(seen) + k > self.backend.n_ctx:
            return EMPTY
        t0 = time.perf_counter()
        keep = min(keep, len(seen) - 1)  # the last token must be fed
        self.backend.rollback(keep)
        logits = self._eval(seen[keep:])
        self._cached = seen
        c = self.cost
        if len(seen) - keep <= self.max_draft + 1:  # a step's worth; a long catch-up after a pause is not typical
            c.syncs += 1
            c.sync_s += time.perf_counter() - t0
        else:
            c.probe_s = time.perf_counter() - t0
        draft: list[int] = []
        rows: list[np.ndarray] = []
        while True:
            pick = self._pick(logits)
            if pick is None:
                break
            tok, fed, q = pick
            draft.append(tok)
            if q is not None:
                rows.append(q)
            if len(draft) >= k:
                break
            t0 = time.perf_counter()
            logits = self._eval([fed])
            self._cached.append(fed)
            c.steps += 1
            c.step_s += time.perf_counter() - t0
        if not draft:
            return EMPTY
        return Draft(draft, c.kind, probs=np.stack(rows) if rows else None)

    def _pick(self, logits: np.ndarray) -> tuple[int, int, np.ndarray | None] | None:
        """(proposed target id, id to feed the drafter, q over target ids or None
        when greedy), or None to stop drafting."""
        if self.sampling is None:
            row = int(np.argmax(logits))
            top = float(logits[row])
            if 1.0 / float(np.exp(logits - top).sum()) < self.p_min:
                return None
            tok = int(self.vocab_map[row]) if self.vocab_map is not None else row
            return tok, tok, None
        params, rng = self.sampling
        q = target_probs(logits, params)
        if q.max() < self.p_min:  # decided before the draw: what is drawn stays q's
            return None
        targets = self.sampled_map if self.sampled_map is not None else self.vocab_map
        if targets is None:
            dist = q
        else:
            # rows that propose nothing stop the draft when drawn, so what is proposed
            # follows q restricted to the rows that propose something
            ok, ids, width = self._proposable(targets)
            mass = float(q[ok].sum())
            if mass <= 0.0:
                return None
            dist = np.bincount(ids, weights=q[ok], minlength=width) / mass
        row = draw(q, rng)
        fed = int(self.vocab_map[row]) if self.vocab_map is not None else row
        tok = fed if targets is None else int(targets[row])
        return (tok, fed, dist) if tok >= 0 else None

    def _proposable(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """(rows that propose a target id, those ids, how many target ids there are):
        computed once per map, not per drawn token (a mask over a 150k vocabulary each time)."""
        if self._proposing is None or self._proposing[0] is not targets:
            ok = targets >= 0
            self._proposing = (targets, ok, targets[ok], int(targets.max()) + 1)
        return self._proposing[1:]

    def reset(self) -> None:
        self.backend.rollback(0)
        self._cached = []
        self._skip = 0

    def memory(self) -> int:
        return sum(self.backend.memory().values())
