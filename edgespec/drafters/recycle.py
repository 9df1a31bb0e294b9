"""Token Recycling (Luo et al. 2024): candidate tokens the target already scored
are not thrown away. Each verification row's top-k tokens become the stored
successors of the token that row followed, and drafts walk that adjacency table.

The table is a dense [n_vocab, k] int32 array, with k chosen so it stays under
the memory bound (4 MB by default): 6 successors for a 152k vocabulary.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgespec.spec.drafter import EMPTY, Draft, Drafter

MAX_BYTES = 4_000_000  # the successor table's default bound


class TokenRecyclingDrafter(Drafter):
    name = "recycle"

    def __init__(self, n_vocab: int, max_bytes: int = MAX_BYTES, max_successors: int = 8,
                 window: float = 8.0) -> None:
        self.n_vocab = n_vocab
        self.window = window
        self.k = int(max(1, min(max_successors, max_bytes // (4 * n_vocab))))
        self.reset()

    def reset(self) -> None:
        self.table = np.full((self.n_vocab, self.k), -1, dtype=np.int32)

    def successors(self, token: int) -> np.ndarray:
        row = self.table[token]
        return row[row >= 0]

    def propose(self, history: Sequence[int], k: int) -> Draft:
        if k <= 0 or not len(history):
            return EMPTY
        out: list[int] = []
        t = history[-1]
        while len(out) < k:
            nxt = int(self.table[t, 0])
            if nxt < 0:
                break
            out.append(nxt)
            t = nxt
        return Draft(out, key="recycle") if out else EMPTY

    def observe(self, history: Sequence[int], inputs: Sequence[int], logits: np.ndarray,
                next_token: int | None = None) -> None:
        followers = [*inputs[1:], next_token]
        for tok, row, nxt in zip(inputs, logits, followers):
            if self.table[tok, 0] == nxt:
                continue  # the stored best successor was just confirmed: skip a pass over the vocabulary
            self.table[tok] = self.top_successors(row)

    def top_successors(self, row: np.ndarray) -> np.ndarray:
        """The k best tokens of a logits row, best first, -1 padded.

        An argpartition over a 152k vocabulary costs ~1 ms; tokens more than
        `window` logits below the best are e^-window as likely and never worth a
        draft slot, so only those above that threshold are ranked (~30 us), and
        where a flat distribution leaves many, they are partitioned, not the row.
        """
        out = np.full(self.k, -1, dtype=np.int32)
        best = row.max()
        cand = np.flatnonzero(row > best - self.window)
        if len(cand) > 4 * self.k:  # a flat distribution: the exact top-k
            if len(cand) < len(row) // 16:
                cand = cand[np.argpartition(row[cand], -self.k)[-self.k :]]
            else:
                cand = np.argpartition(row, -self.k)[-self.k :]
        top = cand[np.argsort(-row[cand], kind="stable")][: self.k]
        out[: len(top)] = top
        return out

    def memory(self) -> int:
        return int(self.table.nbytes)
