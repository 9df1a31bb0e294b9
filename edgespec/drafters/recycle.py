"""Token Recycling (Luo et al. 2024): candidate tokens the target already scored
are not thrown away. Each verification row's best token becomes the stored successor
of the token that row followed, and drafts walk that table as a chain.

The paper keeps each row's top-k for a draft tree; edgespec verifies one chain, which
only ever follows the best successor, so that is all the table keeps: one int32 per
vocabulary entry (0.6 MB for a 152k vocabulary). In greedy decoding a row's best token
is the one the target chose after it, so filling the table reads no logits at all;
sampling ranks the row, since the token drawn need not be the best.

Example: after "x = x + 1" was verified, the table holds x -> " =", " =" -> " x",
" x" -> " +", ...; when the text next ends in "x", the draft is " = x + 1".
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgespec.speculative.drafter import EMPTY, Draft, Drafter, Kind, Sampling

RECYCLE = Kind("recycle")

BYTES_PER_ENTRY = np.dtype(np.int32).itemsize  # the table: one int32 successor per vocabulary entry


class TokenRecyclingDrafter(Drafter):
    name = "recycle"

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self._greedy = True
        self.reset()

    def reset(self) -> None:
        self.table = np.full(self.n_vocab, -1, dtype=np.int32)

    def begin(self, history: Sequence[int], sampling: Sampling = None) -> None:
        self._greedy = sampling is None

    def propose(self, history: Sequence[int], k: int) -> Draft:
        if k <= 0 or not len(history):
            return EMPTY
        out: list[int] = []
        t = history[-1]
        while len(out) < k:
            nxt = int(self.table[t])
            if nxt < 0:
                break
            out.append(nxt)
            t = nxt
        return Draft(out, RECYCLE) if out else EMPTY

    def observe(self, history: Sequence[int], inputs: Sequence[int], logits: np.ndarray,
                next_token: int | None = None) -> None:
        followers = [*inputs[1:], next_token]
        for i, (tok, nxt) in enumerate(zip(inputs, followers)):
            self.table[tok] = nxt if self._greedy and nxt is not None else int(np.argmax(logits[i]))

    def memory(self) -> int:
        return int(self.table.nbytes)
