"""Online n-gram cache (after llama.cpp's common/ngram-cache): continuation counts
of every n-gram seen in the session, kept across chat turns.

Where prompt lookup copies the single most recent continuation, the cache drafts
the most frequent one, and only while it is dominant enough to be worth a slot.

Unlike llama.cpp's, the cache is bounded (`max_bytes`, what the memory planner
allows for it): a long session forgets the n-grams it saw least recently, so hours of
chat do not grow the process.
"""

from __future__ import annotations

from typing import Sequence

from edgespec.speculative.drafter import EMPTY, Draft, Drafter, History, Kind, Sampling

BYTES_PER_TOKEN = 600  # the lookup and n-gram indexes: a few dict entries per history token


class NGramCacheDrafter(Drafter):
    name = "ngram"

    # memory() counts a context like this; the bound is checked against the same sum
    BYTES_PER_CONTEXT, BYTES_PER_CONTINUATION = 250, 100

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1, min_count: int = 2, min_share: float = 0.5,
                 max_bytes: int = 64 << 20) -> None:
        self.max_ngram = max_ngram
        self.max_bytes = max_bytes
        self.min_ngram = min_ngram
        self.min_count = min_count
        self.min_share = min_share
        self.reset()

    def reset(self) -> None:
        self._hist = History()
        # _counts[ngram][next_token] = times seen
        self._counts: dict[tuple[int, ...], dict[int, int]] = {}
        self._entries = 0  # continuations stored, over all contexts
        self._learned = 0

    def begin(self, history: Sequence[int], sampling: Sampling = None) -> None:
        # a new turn repeats earlier turns: learn only what is new, so counts stay honest
        start, _ = self._hist.sync(history, check=True)
        self._learned = min(self._learned, start)
        self._learn()

    def _learn(self) -> None:
        toks = self._hist.seen
        for i in range(max(self._learned, 1), len(toks)):
            nxt = toks[i]
            for n in range(1, min(self.max_ngram, i) + 1):
                key = tuple(toks[i - n : i])
                cont = self._counts.pop(key, None)  # re-inserted: the dict's order is least recently seen first
                if cont is None:
                    cont = {}
                self._counts[key] = cont
                self._entries += nxt not in cont
                cont[nxt] = cont.get(nxt, 0) + 1
        self._learned = max(self._learned, len(toks))
        if self.memory() > self.max_bytes:
            self._prune()

    def _prune(self) -> None:
        """Down to half the bound, least recently seen n-grams first.
        Recent ones stay whole, ambiguous ones included: dropping only the rare ones
        would let shorter, less certain contexts draft where a longer one said 'unsure'."""
        target = self.max_bytes // 2
        for key in list(self._counts):
            if self.memory() <= target:
                break
            self._drop(key)

    def _drop(self, key: tuple[int, ...]) -> None:
        self._entries -= len(self._counts.pop(key))

    def _next(self, ctx: list[int]) -> tuple[int, int] | None:
        for n in range(min(self.max_ngram, len(ctx)), self.min_ngram - 1, -1):
            cont = self._counts.get(tuple(ctx[-n:]))
            if not cont:
                continue
            tok, cnt = max(cont.items(), key=lambda kv: kv[1])
            if cnt >= self.min_count and cnt >= self.min_share * sum(cont.values()):
                return tok, n
            return None  # the longest context seen is ambiguous: shorter ones know less
        return None

    def propose(self, history: Sequence[int], k: int) -> Draft:
        self._hist.sync(history)
        self._learn()
        ctx = list(self._hist.seen[-self.max_ngram :])
        out: list[int] = []
        first_n = 0
        while len(out) < k:
            step = self._next(ctx)
            if step is None:
                break
            tok, n = step
            first_n = first_n or n
            out.append(tok)
            ctx = ctx[1:] + [tok] if len(ctx) >= self.max_ngram else ctx + [tok]
        return Draft(out, Kind("ngram", (f"n{first_n}",))) if out else EMPTY

    def memory(self) -> int:
        return len(self._counts) * self.BYTES_PER_CONTEXT + self._entries * self.BYTES_PER_CONTINUATION
