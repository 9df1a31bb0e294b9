"""`auto`: ask every model-free drafter, keep the proposal worth the most.

Each proposal is scored by the controller's learned acceptance for its kind
(`Draft.key`), so the choice follows what actually verifies on this text.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .base import EMPTY, Draft, Drafter


class AutoDrafter(Drafter):
    name = "auto"

    def __init__(self, drafters: Sequence[Drafter], score: Callable[[str, int], float]) -> None:
        """`score(key, n)`: predicted speed-up of a proposal of kind `key` and length n."""
        self.drafters = list(drafters)
        self.score = score

    def begin(self, history: Sequence[int]) -> None:
        for d in self.drafters:
            d.begin(history)

    def propose(self, history: Sequence[int], k: int) -> Draft:
        best, best_score = EMPTY, 1.0
        for d in self.drafters:
            draft = d.propose(history, k)
            if len(draft):
                s = self.score(draft.key, len(draft))
                if s > best_score or best is EMPTY:
                    best, best_score = draft, s
        return best

    def observe(self, history: Sequence[int], inputs: Sequence[int], logits: np.ndarray) -> None:
        for d in self.drafters:
            d.observe(history, inputs, logits)

    def reset(self) -> None:
        for d in self.drafters:
            d.reset()

    def memory(self) -> int:
        return sum(d.memory() for d in self.drafters)
