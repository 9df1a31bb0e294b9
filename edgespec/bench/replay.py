"""Speculation replayed on plain decoding's own text, priced at measured batch costs.

On real kernels a speculative run and a plain run can write different texts: a batch
rounds differently from one token, a near-tie flips, and from there the texts part.
How much of a text repeats decides what prompt lookup can copy, so the tokens/s of
two methods compare two texts as well as two methods. Replaying is the other
measurement: the engine, controller and drafter run unchanged against a backend whose
greedy choice at every position is the token plain decoding chose there, and each
batch is charged what the calibrated cost curve says a batch of that size costs.
Every method then writes plain's text, deterministically, and the ratio to plain
is the method's alone (timing noise excluded too). It is the `oracle:lookup` bound's
counterpart: the same text and costs, with the real controller instead of one that
knows each proposal's fate.

Only drafters whose drafts do not read the target's logits replay exactly (`DrafterSpec.text_only`):
the backend has no logits beyond each position's greedy token (Token Recycling learns
from the runners-up, and model drafters have costs of their own).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgespec.api import EdgeSpec
from edgespec.errors import EdgespecError
from edgespec.speculative.backend import Backend, Tokenizer
from edgespec.speculative.clock import Clock


class ReplayBackend(Backend, Clock):
    """A target that writes a recorded greedy text: the logits after position i put
    all weight on the recorded token i + 1. As its engine's clock it prices a batch from
    `costs[n]` (seconds for n tokens), so the controller plans from those costs; with
    `curve_known` False they are not known up front, and the engine learns each size from
    the batches it runs, as on a machine that has timed nothing yet."""

    name = "replay"

    def __init__(self, tokenizer: Tokenizer, costs: np.ndarray, n_ctx: int, curve_known: bool = True) -> None:
        self.tokenizer, self.costs, self.n_ctx = tokenizer, np.asarray(costs, dtype=float), n_ctx
        self.known = curve_known
        self.text: list[int] = []
        self.charged: list[float] = []  # seconds per eval, in order
        self._n = 0

    def load(self, tokens: Sequence[int]) -> None:
        """The text to write: prompt + recorded output."""
        self.text, self.charged, self._n = list(tokens), [], 0

    @property
    def n_past(self) -> int:
        return self._n

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        n = len(ids)
        n_logits = n if n_logits is None else n_logits
        out = np.zeros((n_logits, self.n_vocab), np.float32)
        end = self.tokenizer.eos_id if self.tokenizer.eos_id is not None else 0
        for row, pos in enumerate(range(self._n + n - n_logits, self._n + n)):
            out[row, self.text[pos + 1] if pos + 1 < len(self.text) else end] = 1.0
        self.charged.append(self.seconds(n, self._n))
        self._n += n
        return out

    def rollback(self, n_past: int) -> None:
        self._check_rollback(n_past)
        self._n = n_past

    def memory(self) -> dict[str, int]:
        return {}

    def seconds(self, n: int, n_past: int) -> float:
        top = len(self.costs) - 1
        if n <= top:
            return float(self.costs[n])
        return float(self.costs[top] * n / top)  # a prompt: as the largest measured batch, per token


def priced(llm: EdgeSpec, curve: dict[int, float]) -> np.ndarray:
    """Seconds per batch size as `llm`'s controller prices `curve` (sizes it lacks
    interpolated): what replays and the oracle are charged."""
    cost = llm.engine.controller.cost
    cost.set_timed(curve)
    return cost.costs()


def replay(tokenizer: Tokenizer, runs: Sequence[tuple[str, Sequence[int], Sequence[int]]], drafter: str,
           costs: np.ndarray, max_draft: int, seed: dict | None = None, min_k: int = 0,
           learned: dict | None = None, curve_known: bool = True) -> dict[str, list[float]]:
    """Replay `drafter` over `runs` (category, prompt ids, plain greedy output), one
    engine for all of them in order, as the bench runs them. `seed`: each kind's
    long-run acceptance, as the real run's controller started from; `min_k`: as the bench's
    `--draft-min`; `learned`, if given, receives the acceptance counts of every kind at the
    end, the seed's and the replay's, as a machine stores them (a `seed` for another replay);
    `curve_known` False: the engine learns the curve from the replay's batches (ReplayBackend).

    Returns per category and "all": [plain seconds, replayed seconds, drafted, accepted],
    decode only (after the first token, which comes with the prompt)."""
    backend = ReplayBackend(tokenizer, costs, max(len(p) + len(o) for _, p, o in runs) + max_draft + 2, curve_known)
    llm = EdgeSpec(backend, drafter=drafter, max_draft=max_draft, clock=backend)
    llm.engine.controller.min_k = min_k
    if seed:
        llm.engine.controller.acceptance.seed(seed)
    totals: dict[str, list[float]] = {}
    for cat, prompt, output in runs:
        backend.load([*prompt, *output])
        llm.reset()
        written = list(llm.engine.generate(list(prompt), len(output)))
        if written != list(output):  # the backend forces plain's text: anything else is a bug
            raise EdgespecError(f"replaying {drafter} wrote another text than plain's ({len(written)} tokens)")
        st = llm.last_stats
        for c in (cat, "all"):
            t = totals.setdefault(c, [0.0, 0.0, 0, 0])
            t[0] += max(len(output) - 1, 0) * float(costs[1])
            t[1] += sum(backend.charged[1:])  # the first eval is the prompt's, with the first token
            t[2] += st.drafted
            t[3] += st.accepted
    if learned is not None:
        learned.update(llm.engine.controller.acceptance.long_run())
    return totals
