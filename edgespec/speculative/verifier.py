"""Verification: which draft tokens the target accepts, and the token after them.

Pure functions over numpy arrays. Greedy verification keeps the longest prefix of
the draft that equals the target's argmax, then adds the target's own next token,
so the output is exactly what plain greedy decoding produces. Sampling uses
speculative rejection sampling (Leviathan et al. 2023; Chen et al. 2023), which
leaves the target's distribution unchanged whatever the draft proposes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 keeps all tokens
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")


def target_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution plain sampling draws from: temperature, then top-k, then top-p.

    Works on one row [vocab] or a batch [n, vocab]; returns float64 probabilities.
    """
    x = np.asarray(logits, dtype=np.float64) / params.temperature
    single = x.ndim == 1
    x = np.atleast_2d(x).copy()
    vocab = x.shape[1]
    if 0 < params.top_k < vocab:
        kth = np.partition(x, vocab - params.top_k, axis=1)[:, vocab - params.top_k][:, None]
        x[x < kth] = -np.inf
    x -= x.max(axis=1, keepdims=True)
    p = np.exp(x)
    p /= p.sum(axis=1, keepdims=True)
    if params.top_p < 1.0:
        for row in p:
            order = np.argsort(-row, kind="stable")
            cum = np.cumsum(row[order])
            # keep the smallest prefix whose mass reaches top_p (always at least one token)
            cut = int(np.searchsorted(cum, params.top_p - 1e-9, side="left")) + 1  # 1e-9: float sums
            row[order[cut:]] = 0.0
            row /= row.sum()
    return p[0] if single else p


@dataclass(frozen=True)
class Verdict:
    n_accepted: int  # draft tokens kept
    next_token: int  # the target's token after them (correction or bonus)

    @property
    def tokens(self) -> int:
        return self.n_accepted + 1


def verify_greedy(draft: np.ndarray | list[int], logits: np.ndarray) -> Verdict:
    """logits[i] are the target's logits after the i-th input of [last, *draft]."""
    # row by row, stopping at the first mismatch: only n+1 argmaxes over the
    # vocabulary instead of k+1 (a 2-D argmax is also slower per row)
    for i, d in enumerate(draft):
        top = int(np.argmax(logits[i]))
        if top != d:
            return Verdict(i, top)
    k = len(draft)
    return Verdict(k, int(np.argmax(logits[k])))


def verify_sampling(
    draft: np.ndarray | list[int],
    draft_probs: np.ndarray | None,
    logits: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator,
) -> Verdict:
    """Rejection sampling over a draft.

    `draft_probs[i]` is the drafter's distribution q_i that draft[i] was drawn
    from ([k, vocab]); None means the draft is deterministic (q_i is one-hot at
    draft[i]), as for n-gram drafts. Token i is accepted with probability
    min(1, p_i(x)/q_i(x)); on rejection the replacement is drawn from
    norm(max(0, p_i - q_i)), so every emitted token is distributed as p.
    Rows of `draft_probs` narrower than the logits (a drafter that cannot name the
    target's last ids) give those ids probability 0. A row k (after the draft) is the
    distribution of a token drawn there that a grammar refused (p is 0 there): that draw is
    rejected, so the token after the draft comes from norm(max(0, p_k - q_k)).
    """
    k = len(draft)
    p = target_probs(logits[: k + 1], params)
    if draft_probs is not None and draft_probs.shape[1] < p.shape[1]:
        draft_probs = np.pad(draft_probs[: k + 1], ((0, 0), (0, p.shape[1] - draft_probs.shape[1])))
    for i in range(k):
        x = int(draft[i])
        if draft_probs is None:
            px, qx = p[i, x], 1.0
        else:
            px, qx = p[i, x], float(draft_probs[i, x])
        if qx > 0 and rng.random() * qx < px:  # accept with probability min(1, px/qx)
            continue
        if draft_probs is None:
            residual = p[i].copy()
            residual[x] = 0.0
        else:
            residual = np.maximum(p[i] - draft_probs[i], 0.0)
        total = residual.sum()
        if total <= 0.0:  # p == q: any rejection is measure-zero; fall back to p
            residual, total = p[i], p[i].sum()
        return Verdict(i, draw(residual / total, rng))
    if draft_probs is not None and len(draft_probs) > k:
        residual = np.maximum(p[k] - draft_probs[k], 0.0)
        if residual.sum() > 0.0:
            return Verdict(k, draw(residual / residual.sum(), rng))
    return Verdict(k, draw(p[k], rng))


def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """One token from plain decoding's distribution."""
    if params.greedy:
        return int(np.argmax(logits))
    return draw(target_probs(logits, params), rng)


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One index drawn from the probabilities `p`."""
    # inverse-CDF on one uniform: cheaper than rng.choice on a 150k vocabulary
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))
