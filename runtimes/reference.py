"""A small float64 numpy transformer whose arithmetic does not depend on batch shape.

Real kernels round differently for a batch of k tokens than for one token, so a
near-tie can flip between plain and speculative decoding. This backend computes
every position by the same sequence of operations whatever the batch, so
speculative greedy output must equal plain greedy output token for token: the
exact test of losslessness. Its tokenizer is byte-level (256 bytes + BOS + EOS),
so any text, in any script, round-trips.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from edgespec.errors import ContextOverflowError
from edgespec.speculative.backend import Backend, Tokenizer


class ByteTokenizer(Tokenizer):
    BOS, EOS = 256, 257
    _special = {"<s>": BOS, "</s>": EOS}

    def __init__(self) -> None:
        self.n_vocab = 258
        self.bos_id, self.eos_id = self.BOS, self.EOS
        self.add_bos = True

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        ids = [self.BOS] if add_bos else []
        parts = re.split(r"(<s>|</s>)", text) if special else [text]
        for part in parts:
            if special and part in self._special:
                ids.append(self._special[part])
            else:
                ids.extend(part.encode("utf-8"))
        return ids

    def token_bytes(self, token: int) -> bytes:
        return bytes([token]) if token < 256 else b""

    def token_text(self, token: int) -> str:
        return {self.BOS: "<s>", self.EOS: "</s>"}.get(token) or self.token_bytes(token).decode("latin-1")

    def is_eog(self, token: int) -> bool:
        return token == self.EOS

    def is_special(self, token: int) -> bool:
        return token >= 256

    @property
    def chat_template(self) -> str:
        return (
            "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
        )


class ReferenceModel:
    """Random weights, pre-norm decoder: enough structure to exercise speculation."""

    def __init__(self, n_vocab: int = 258, d: int = 48, n_layer: int = 2, n_head: int = 4,
                 n_ctx: int = 1024, seed: int = 0, eos_bias: float = -4.0, scale: float = 2.5) -> None:
        rng = np.random.default_rng(seed)
        self.d, self.n_layer, self.n_head, self.n_ctx = d, n_layer, n_head, n_ctx
        g = lambda *shape, s=1.0: rng.standard_normal(shape) * s / np.sqrt(shape[0])  # noqa: E731
        self.emb = rng.standard_normal((n_vocab, d))
        self.pos = rng.standard_normal((n_ctx, d)) * 0.3
        self.layers = [
            dict(wq=g(d, d), wk=g(d, d), wv=g(d, d), wo=g(d, d), w1=g(d, 4 * d), w2=g(4 * d, d))
            for _ in range(n_layer)
        ]
        self.out = g(d, n_vocab, s=scale)
        self.bias = np.zeros(n_vocab)
        self.bias[ByteTokenizer.EOS] = eos_bias  # stopping is possible but rare
        self.bias[ByteTokenizer.BOS] = -1e9


def _rms(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(x @ x / x.size + 1e-6)


def attend(q: np.ndarray, keys: np.ndarray, vals: np.ndarray, n_head: int) -> np.ndarray:
    """One position's multi-head attention over the cache's `keys` and `vals` (positions x d),
    every head at once: the same operations whatever batch the position came in."""
    n, d = keys.shape
    hd = d // n_head
    heads = lambda a: a.reshape(n, n_head, hd).transpose(1, 0, 2)  # noqa: E731 (head, position, head_dim)
    scores = (heads(keys) @ q.reshape(n_head, hd, 1))[..., 0] / np.sqrt(hd)
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    return ((e / e.sum(axis=1, keepdims=True))[:, None, :] @ heads(vals)).reshape(d)


class ReferenceBackend(Backend):
    name = "reference"

    def __init__(self, model: ReferenceModel | None = None, n_ctx: int | None = None) -> None:
        self.model = model or ReferenceModel()
        self.tokenizer = ByteTokenizer()
        self.n_ctx = min(n_ctx or self.model.n_ctx, self.model.n_ctx)
        m = self.model
        self._k = np.zeros((m.n_layer, self.n_ctx, m.d))
        self._v = np.zeros((m.n_layer, self.n_ctx, m.d))
        self._n_past = 0
        self.evals = 0  # eval calls (batches) and tokens evaluated: lets tests count target work
        self.tokens_evaluated = 0

    @property
    def n_past(self) -> int:
        return self._n_past

    def _step(self, token: int) -> np.ndarray:
        m, p = self.model, self._n_past
        x = m.emb[token] + m.pos[p]
        for li, w in enumerate(m.layers):
            h = _rms(x)
            q, k, v = h @ w["wq"], h @ w["wk"], h @ w["wv"]
            self._k[li, p], self._v[li, p] = k, v
            att = attend(q, self._k[li, : p + 1], self._v[li, : p + 1], m.n_head)
            x = x + att @ w["wo"]
            h = _rms(x)
            x = x + np.tanh(h @ w["w1"]) @ w["w2"]
        self._n_past += 1
        return _rms(x) @ m.out + m.bias

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        if not len(ids):
            raise ValueError("eval needs at least one token")
        if self._n_past + len(ids) > self.n_ctx:
            raise ContextOverflowError(f"context full: {self._n_past} + {len(ids)} tokens exceed {self.n_ctx}")
        self.evals += 1
        self.tokens_evaluated += len(ids)
        rows = [self._step(int(t)) for t in ids]
        n_logits = len(ids) if n_logits is None else n_logits
        return np.array(rows[len(rows) - n_logits :], dtype=np.float64)

    def rollback(self, n_past: int) -> None:
        self._check_rollback(n_past)
        self._n_past = n_past

    def memory(self) -> dict[str, int]:
        m = self.model
        weights = m.emb.nbytes + m.pos.nbytes + m.out.nbytes + sum(a.nbytes for w in m.layers for a in w.values())
        return {"weights": weights, "kv_cache": self._k.nbytes + self._v.nbytes}
