"""Ternary weights and the table-lookup matmul (TLMM) of TeLLMe, in numpy.

Weights are quantized as in BitNet b1.58: one absmean scale per matrix, every
weight rounded to -1, 0 or +1. Activations are int8 with one absmax scale per
token. A ternary matmul then needs no multiplications: for each group of G
activations, every possible ternary pattern's partial sum is computed once per
token (the "table", built online), and a weight row becomes a list of table
indices. Sign symmetry halves the table: a pattern and its negation share an
entry, the weight code carries the sign. With G = 3 the table has 14 entries
(13 patterns led by +1, plus zero); with G = 4, 41.

Everything here is integer arithmetic, so `tlmm` is bit-exact against a plain
int32 matmul of the same ternary weights and int8 activations (tests check it
with hypothesis and on real layers of Qwen2.5-Coder-0.5B).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


def ternarize(w: np.ndarray) -> tuple[np.ndarray, float]:
    """BitNet b1.58 absmean quantization: (int8 weights in {-1, 0, 1}, scale)."""
    scale = float(np.mean(np.abs(w))) or 1.0
    return np.clip(np.rint(w / scale), -1, 1).astype(np.int8), scale


def quantize_activations(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-token absmax int8: (int8 [n, d], float scales [n]) with x ≈ q * scale."""
    x = np.atleast_2d(x)
    amax = np.max(np.abs(x), axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    return np.clip(np.rint(x / scale[:, None]), -127, 127).astype(np.int8), scale


@lru_cache(maxsize=None)
def patterns(g: int) -> np.ndarray:
    """The table's patterns: zero, then every ternary G-vector whose first nonzero
    trit is +1. Shape [(3**g + 1) // 2, g]."""
    rows = [p for p in itertools.product((-1, 0, 1), repeat=g) if next((t for t in p if t), 1) == 1]
    rows.sort(key=lambda p: (any(p), p))  # zero first, so code 0 means "nothing to add"
    return np.array(rows, dtype=np.int32)


@lru_cache(maxsize=None)
def _code_of(g: int) -> tuple[np.ndarray, np.ndarray]:
    """For every ternary G-vector (as a base-3 number of trits+1): its table entry and sign."""
    index = {tuple(p): i for i, p in enumerate(patterns(g).tolist())}
    entry = np.zeros(3**g, dtype=np.uint8)
    sign = np.ones(3**g, dtype=np.int8)
    for n, p in enumerate(itertools.product((-1, 0, 1), repeat=g)):
        base3 = sum((t + 1) * 3 ** (g - 1 - j) for j, t in enumerate(p))
        if p in index:
            entry[base3] = index[p]
        else:
            entry[base3], sign[base3] = index[tuple(-t for t in p)], -1
    return entry, sign


def code_bits(g: int) -> int:
    """Bits of one weight code: a table entry plus the sign (5 for G = 3)."""
    return (len(patterns(g)) - 1).bit_length() + 1


@dataclass
class PackedTernary:
    """A ternary weight matrix [out, in] as TLMM codes: per output row and group of
    G inputs, a table entry and a sign. In hardware the two pack into one small
    code (5 bits for G = 3: 1.67 bits per weight)."""

    entry: np.ndarray  # uint8 [out, groups]
    sign: np.ndarray  # int8 [out, groups], +1 or -1
    g: int
    n_in: int
    scale: float

    @property
    def shape(self) -> tuple[int, int]:
        return self.entry.shape[0], self.n_in

    @property
    def nbytes_packed(self) -> int:
        """Bytes the codes take packed end to end, as the board streams them."""
        return int(np.ceil(self.entry.size * code_bits(self.g) / 8))


def pack(wq: np.ndarray, g: int = 3, scale: float = 1.0) -> PackedTernary:
    """Ternary int8 weights [out, in] -> TLMM codes (inputs zero-padded to a multiple of g)."""
    out, n_in = wq.shape
    if np.any(np.abs(wq) > 1):
        raise ValueError("weights must be ternary (-1, 0, 1)")
    pad = (-n_in) % g
    w = np.pad(wq.astype(np.int32), ((0, 0), (0, pad))).reshape(out, -1, g) + 1
    base3 = (w * (3 ** np.arange(g - 1, -1, -1))).sum(axis=2)
    entry, sign = _code_of(g)
    return PackedTernary(entry[base3], sign[base3], g, n_in, scale)


def unpack(p: PackedTernary) -> np.ndarray:
    """Codes -> ternary int8 weights [out, in]: the inverse of `pack`."""
    w = patterns(p.g)[p.entry] * p.sign[..., None]
    return w.reshape(p.entry.shape[0], -1)[:, : p.n_in].astype(np.int8)


def build_table(xq: np.ndarray, g: int) -> np.ndarray:
    """The online precomputation: for each token and group of g activations, the
    partial sum of every pattern. int32 [n, groups, entries]."""
    n, n_in = xq.shape
    x = np.pad(xq.astype(np.int32), ((0, 0), (0, (-n_in) % g))).reshape(n, -1, g)
    return x @ patterns(g).T


def tlmm(xq: np.ndarray, w: PackedTernary) -> np.ndarray:
    """int8 activations [n, in] times ternary weights -> exact int32 [n, out], by table lookup."""
    table = build_table(xq, w.g)  # [n, groups, entries]
    groups = np.arange(w.entry.shape[1])
    # one lookup per (token, output, group), signed, summed over groups: additions only
    looked = table[:, groups[None, :], w.entry]  # [n, out, groups]
    return np.einsum("nog,og->no", looked, w.sign.astype(np.int32), dtype=np.int32)


def int_matmul(xq: np.ndarray, wq: np.ndarray) -> np.ndarray:
    """The reference TLMM must equal: a plain int32 matmul."""
    return xq.astype(np.int32) @ wq.astype(np.int32).T


def ternary_linear(x: np.ndarray, w: PackedTernary) -> np.ndarray:
    """A BitLinear layer: quantize activations, TLMM, rescale to float."""
    xq, s = quantize_activations(x)
    return tlmm(xq, w).astype(np.float64) * (s[:, None] * w.scale)


# The packed codes on disk (`edgespec export --to ternary`), per ternary weight W [out, in]:
# W.entry (two 4-bit codes per byte for G = 3), W.sign (one bit per code), W.scale, W.shape
TERNARY_FILE = "model.ternary.npz"


def save_packed(arrays: dict, name: str, p: PackedTernary) -> None:
    e = p.entry
    if e.shape[1] % 2:
        e = np.pad(e, ((0, 0), (0, 1)))
    arrays[f"{name}.entry"] = (e[:, 0::2] | (e[:, 1::2] << 4)).astype(np.uint8)  # 14 entries fit 4 bits
    arrays[f"{name}.sign"] = np.packbits(p.sign < 0, axis=1)
    arrays[f"{name}.scale"] = np.float64(p.scale)
    arrays[f"{name}.shape"] = np.array([*p.entry.shape, p.n_in, p.g])


def load_packed(z, name: str) -> PackedTernary:
    out, groups, n_in, g = (int(v) for v in z[f"{name}.shape"])
    e = z[f"{name}.entry"]
    entry = np.empty((out, e.shape[1] * 2), np.uint8)
    entry[:, 0::2], entry[:, 1::2] = e & 0x0F, e >> 4
    neg = np.unpackbits(z[f"{name}.sign"], axis=1, count=groups).astype(bool)
    return PackedTernary(entry[:, :groups], np.where(neg, -1, 1).astype(np.int8), g, n_in, float(z[f"{name}.scale"]))
