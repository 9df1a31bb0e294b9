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

And a copy ends where this prompt's copies keep ending: an edit breaks off its copy
at the same kind of token each time (the `):` of each signature that gains type
hints, the line after each `def` that gains a docstring). Every proposal is scored
against the text that followed it, and a proposal stops before a token at which
copies broke more often than they went on, at least twice (`CopyBreaks`): verifying
past it would mostly pay for rows that are rejected.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from edgespec.speculative.drafter import EMPTY, Draft, Drafter, History, Kind, Sampling
from edgespec.speculative.sequence import matched_so_far


class PromptLookupDrafter(Drafter):
    name = "lookup"

    def __init__(self, max_ngram: int = 8, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.reset()

    def reset(self) -> None:
        self._hist = History()
        self._prompt_len = 0  # history[:_prompt_len] is this generation's prompt
        self._breaks = CopyBreaks()
        self._clear_index()

    def begin(self, history: Sequence[int], sampling: Sampling = None) -> None:
        _, rewritten = self._hist.sync(history, check=True)
        if rewritten:
            self._clear_index()
        self._prompt_len = len(history)
        self._breaks = CopyBreaks()  # evidence belongs to one prompt, as the controller's does
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
        self._breaks.advance(toks)
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
            # learned apart: the match's length, an ambiguous or continued match, a copy from the prompt
            flags = (key in self._ambiguous[n], continued, pos < self._prompt_len)
            tags = (f"n{_bucket(n)}", *(t for t, on in zip(("a", "c", "p"), flags) if on))
            copy = toks[pos : pos + k]
            self._breaks.add(copy, pos, length)
            return Draft(copy[: self._breaks.safe_length(copy)], Kind(self.name, tags))
        self._anchor = self._earlier = None
        return EMPTY

    def memory(self) -> int:
        entries = sum(len(d) for d in (*self._index, *self._in_prompt, *self._ambiguous)) + self._breaks.entries()
        return entries * (120 + 8 * self.max_ngram // 2) + 8 * len(self._hist.seen)


class CopyBreaks:
    """Where a prompt's copies broke off: per token, how often the text went past it in
    a copy and how often it parted from the copy there. Each copied source position
    counts once, by its latest verdict, however many overlapping proposals copied it.

    For example, with copies of `f ( x ) :` that the text wrote as `f ( x : int ) :`,
    twice, the copy broke at `)` twice and never went past it: the next proposal
    `g ( y ) : return` stops at `g ( y`."""

    MIN_BREAKS = 2

    def __init__(self) -> None:
        self._open: list[tuple[list[int], int, int, int]] = []  # (copy, its source, start, tokens matched)
        self._broke_at: dict[int, bool] = {}  # source position -> the copy broke there
        self._broke: Counter[int] = Counter()
        self._went_on: Counter[int] = Counter()

    def add(self, copy: list[int], source: int, start: int) -> None:
        """`copy`, the tokens from history position `source` on, proposed at `start`."""
        self._open.append((copy, source, start, 0))

    def advance(self, toks: Sequence[int]) -> None:
        """Score the open copies on the text written since: linear in what is written."""
        still_open = []
        for copy, source, start, matched in self._open:
            m, decided = matched_so_far(copy, start, matched, toks)
            for i in range(matched, m):
                self._judge(source + i, copy[i], broke=False)
            if not decided:
                still_open.append((copy, source, start, m))
            elif m < len(copy):
                self._judge(source + m, copy[m], broke=True)
        self._open = still_open

    def _judge(self, pos: int, token: int, broke: bool) -> None:
        before = self._broke_at.get(pos)
        if before is not None:
            (self._broke if before else self._went_on)[token] -= 1
        self._broke_at[pos] = broke
        (self._broke if broke else self._went_on)[token] += 1

    def safe_length(self, copy: Sequence[int]) -> int:
        """How much of `copy` comes before a token at which copies broke more often than
        they went on (and at least MIN_BREAKS times)."""
        broke, went_on = self._broke, self._went_on
        return next((i for i, t in enumerate(copy) if broke[t] >= self.MIN_BREAKS and broke[t] > went_on[t]),
                    len(copy))

    def entries(self) -> int:
        return len(self._broke_at) + len(self._broke) + len(self._went_on)


def _bucket(n: int) -> str:
    """Match lengths grouped for acceptance statistics."""
    return str(n) if n < 4 else ("4-7" if n < 8 else "8+")
