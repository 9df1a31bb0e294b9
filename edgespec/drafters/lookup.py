"""Prompt lookup: continue the longest suffix of the history that occurred before.

Instead of rescanning the history each step (as llama-cpp-python's
LlamaPromptLookupDecoding does with numpy windows), an index maps every n-gram
(n = 1..max_ngram) to the position right after its most recent occurrence. It is
updated in O(max_ngram) per new token; a proposal is max_ngram dict look-ups.
"""

from __future__ import annotations

from typing import Sequence

from .base import EMPTY, Draft, Drafter, History


class PromptLookupDrafter(Drafter):
    name = "lookup"

    def __init__(self, max_ngram: int = 8, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.reset()

    def reset(self) -> None:
        self._hist = History()
        # _index[n][ngram] = position after the most recent occurrence of ngram
        self._index: list[dict[tuple[int, ...], int]] = [dict() for _ in range(self.max_ngram + 1)]
        self._indexed = 0  # history[:_indexed] has its n-grams in the index

    def begin(self, history: Sequence[int]) -> None:
        start, rewritten = self._hist.sync(history, check=True)
        if rewritten:
            self._index = [dict() for _ in range(self.max_ngram + 1)]
            self._indexed = 0
        self._catch_up()

    def _catch_up(self) -> None:
        toks = self._hist.seen
        # an n-gram ending at position i-1 is indexed once token i exists, so a
        # match always has a continuation; the newest suffix is looked up, not stored
        for i in range(max(self._indexed, 1), len(toks)):
            for n in range(1, min(self.max_ngram, i) + 1):
                self._index[n][tuple(toks[i - n : i])] = i
        self._indexed = max(self._indexed, len(toks))

    def propose(self, history: Sequence[int], k: int) -> Draft:
        self._hist.sync(history)
        self._catch_up()
        toks = self._hist.seen
        if k <= 0:
            return EMPTY
        for n in range(min(self.max_ngram, len(toks)), self.min_ngram - 1, -1):
            pos = self._index[n].get(tuple(toks[-n:]))
            if pos is not None:
                return Draft(toks[pos : pos + k], key=f"lookup/n{_bucket(n)}")
        return EMPTY

    def memory(self) -> int:
        entries = sum(len(d) for d in self._index)
        return entries * (120 + 8 * self.max_ngram // 2) + 8 * len(self._hist.seen)


def _bucket(n: int) -> str:
    """Match lengths grouped for acceptance statistics."""
    return str(n) if n < 4 else ("4-7" if n < 8 else "8+")
