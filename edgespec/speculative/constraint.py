"""The constraint an answer follows, as the engine sees it."""

from __future__ import annotations

from typing import Sequence

import numpy as np


class Constraint:
    """What the engine asks of the answer's constraint: tokens it forces, how many of a draft it
    allows, logits masked to what it allows, and the tokens chosen committed (which may close
    the answer at its limit). This base allows every token: the engine's when none is asked for;
    structured/ implements it with a grammar."""

    seconds = 0.0  # spent computing masks, forced tokens and checks
    closed = False  # the limit came and the answer is whole (GrammarConstraint.closed)

    def begin(self, max_tokens: int) -> None:
        pass

    def forced(self, k: int) -> list[int]:
        return []

    def legal(self, tokens: Sequence[int]) -> int:
        return len(tokens)

    def masked(self, draft: Sequence[int], logits: np.ndarray, argmax_only: bool = False) -> np.ndarray:
        return logits

    def commit(self, tokens: Sequence[int]) -> list[int]:
        return list(tokens)
