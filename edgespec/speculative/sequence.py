"""Small helpers over token sequences."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgespec.errors import ContextOverflowError, EdgespecError


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n


def matched_so_far(tokens: Sequence[int], start: int, matched: int, history: Sequence[int]) -> tuple[int, bool]:
    """`tokens` were proposed to follow history[:start], and their first `matched` were
    found written already: how many the text has written now, and whether that is their
    verdict (all written, or a mismatch seen). Compares only what arrived since."""
    end = min(len(tokens), len(history) - start)
    # a token at a time: a step brings a few, too few for numpy's per-call cost to pay
    while matched < end and tokens[matched] == history[start + matched]:
        matched += 1
    return matched, matched == len(tokens) or matched < end


def checked_request(prompt: Sequence[int], max_tokens: int, n_ctx: int) -> list[int]:
    """The prompt as a list, if a generation can start from it: not empty, room left to answer."""
    prompt = list(prompt)
    if not prompt:
        raise EdgespecError("the prompt is empty")
    if max_tokens < 1:
        raise EdgespecError(f"max_tokens must be at least 1, not {max_tokens}")
    if len(prompt) >= n_ctx:
        raise ContextOverflowError(f"the prompt is {len(prompt)} tokens; the context holds {n_ctx} "
                                   "(leave room for the answer)")
    return prompt
