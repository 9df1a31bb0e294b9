"""Prompt lookup: continue the longest suffix of the history that occurred before.

Instead of rescanning the history each step (as llama-cpp-python's
LlamaPromptLookupDecoding does with numpy windows), an index maps every n-gram
(n = 1..max_ngram) to the position right after its most recent occurrence. It is
updated in O(max_ngram) per new token; a proposal is max_ngram dict look-ups.

Three things the index cannot see are kept beside it, because they predict
acceptance (replayed gains in docs/design.md):

- whether an n-gram has been followed by more than one token (an *ambiguous*
  match, key suffix `/a`): the copy then often takes the wrong branch;
- whether the history since the previous proposal was copied from its source, so
  the source simply goes on (a *continued* alignment, key suffix `/c`). Then that
  alignment is preferred to a more recent occurrence of the same n-gram: when a
  rewrite copies a file, the file is the better guide than an echo of it;
- whether the source lies in this generation's prompt (key suffix `/p`). Short of a
  continued alignment, the prompt's latest occurrence is preferred to one in the
  answer: an edit copies the code it was given for long runs, while an n-gram the
  answer already wrote is more often a phrase that recurs and then parts.

They split the controller's acceptance statistics and choose among equally long
matches; every draft is still verified.
"""

from __future__ import annotations

from typing import Sequence

from edgespec.spec.drafter import EMPTY, Draft, Drafter, History


class PromptLookupDrafter(Drafter):
    name = "lookup"

    def __init__(self, max_ngram: int = 8, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.reset()

    def reset(self) -> None:
        self._hist = History()
        self._prompt_len = 0  # history[:_prompt_len] is this generation's prompt
        self._clear_index()

    def begin(self, history: Sequence[int]) -> None:
        _, rewritten = self._hist.sync(history, check=True)
        if rewritten:
            self._clear_index()
        self._prompt_len = len(history)
        self._catch_up()

    def _clear_index(self) -> None:
        # _index[n][ngram] = position after the most recent occurrence of ngram; _in_prompt
        # the same, among the occurrences whose next token is in a prompt
        self._index: list[dict[tuple[int, ...], int]] = [dict() for _ in range(self.max_ngram + 1)]
        self._in_prompt: list[dict[tuple[int, ...], int]] = [dict() for _ in range(self.max_ngram + 1)]
        self._ambiguous: list[set[tuple[int, ...]]] = [set() for _ in range(self.max_ngram + 1)]
        self._indexed = 0  # history[:_indexed] has its n-grams in the index
        # (source position, history length) of the latest proposal, and of the one before
        # it at a shorter history (what a repeated call at the same length compares to)
        self._anchor: tuple[int, int] | None = None
        self._earlier: tuple[int, int] | None = None

    def _catch_up(self) -> None:
        toks = self._hist.seen
        # an n-gram ending at position i-1 is indexed once token i exists, so a
        # match always has a continuation; the newest suffix is looked up, not stored
        for i in range(max(self._indexed, 1), len(toks)):
            for n in range(1, min(self.max_ngram, i) + 1):
                key = tuple(toks[i - n : i])
                before = self._index[n].get(key)
                if before is not None and toks[before] != toks[i]:
                    self._ambiguous[n].add(key)
                self._index[n][key] = i
                if i < self._prompt_len:
                    self._in_prompt[n][key] = i
        self._indexed = max(self._indexed, len(toks))

    def propose(self, history: Sequence[int], k: int) -> Draft:
        self._hist.sync(history)
        self._catch_up()
        toks = self._hist.seen
        if k <= 0:
            return EMPTY
        length = len(toks)
        if self._anchor is not None and self._anchor[1] < length:
            self._earlier = self._anchor
        for n in range(min(self.max_ngram, length), self.min_ngram - 1, -1):
            key = tuple(toks[-n:])
            pos = self._index[n].get(key)
            if pos is None:
                continue
            # where the previous proposal's source has got to if the text since was copied from it
            moved = None if self._earlier is None else self._earlier[0] + length - self._earlier[1]
            continued = moved is not None and n <= moved < length and tuple(toks[moved - n : moved]) == key
            if continued:
                pos = moved
            elif key in self._in_prompt[n]:
                pos = self._in_prompt[n][key]
            self._anchor = (pos, length)
            tags = ("/a" if key in self._ambiguous[n] else "") + ("/c" if continued else "")
            tags += "/p" if pos < self._prompt_len else ""
            return Draft(toks[pos : pos + k], key=f"lookup/n{_bucket(n)}{tags}")
        self._anchor = self._earlier = None
        return EMPTY

    def memory(self) -> int:
        entries = sum(len(d) for d in (*self._index, *self._in_prompt, *self._ambiguous))
        return entries * (120 + 8 * self.max_ngram // 2) + 8 * len(self._hist.seen)


def _bucket(n: int) -> str:
    """Match lengths grouped for acceptance statistics."""
    return str(n) if n < 4 else ("4-7" if n < 8 else "8+")
