"""The constraint an answer follows, as the engine sees it, and the one it follows when none
is asked for."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np


class Constraint(ABC):
    """What the engine asks of the answer's constraint: tokens it forces, how many of a draft it
    allows, logits masked to what it allows, and the tokens chosen committed (which may close
    the answer at its limit). A draft is checked, never applied: only `commit` moves the
    constraint on, so a rejected draft has nothing to roll back. structured/ implements it with
    a grammar."""

    seconds = 0.0  # spent computing masks, forced tokens and checks
    closed = False  # the limit came and the answer is whole (GrammarConstraint.closed)

    def begin(self, max_tokens: int) -> None:
        """A generation of at most `max_tokens` starts."""

    @abstractmethod
    def forced(self, k: int) -> list[int]:
        """The next tokens only this constraint allows, at most k (none: the model chooses)."""

    @abstractmethod
    def legal(self, tokens: Sequence[int]) -> int:
        """How many of a draft's first tokens the constraint allows."""

    @abstractmethod
    def masked(self, draft: Sequence[int], logits: np.ndarray, argmax_only: bool = False) -> np.ndarray:
        """The logits after the tokens committed and each prefix of `draft`, with what the
        constraint refuses masked out (`argmax_only`: enough for greedy choice)."""

    @abstractmethod
    def commit(self, tokens: Sequence[int]) -> list[int]:
        """Take the tokens chosen; returns what the answer holds instead where the limit closes it."""


class Unconstrained(Constraint):
    """Every token allowed, nothing forced: the engine's when no constraint is asked for."""

    def forced(self, k: int) -> list[int]:
        return []

    def legal(self, tokens: Sequence[int]) -> int:
        return len(tokens)

    def masked(self, draft: Sequence[int], logits: np.ndarray, argmax_only: bool = False) -> np.ndarray:
        return logits

    def commit(self, tokens: Sequence[int]) -> list[int]:
        return list(tokens)
