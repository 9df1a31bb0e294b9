"""The `fpga-sim` backend: a whole decoder whose linear layers run through the
TLMM kernel (ternary weights, int8 activations), with a board's cycle model
adding up what each call would take on the FPGA.

The model is a ternarized decoder of the reference architecture (pre-norm,
attention and an MLP per block; the LM head in float on the board's CPU, as
TeLLMe does). Each position is computed by the same operations whatever the
batch (TLMM is integer-exact, activations are quantized per token, the head is
applied row by row), so speculation on this backend is exactly lossless, as on
the reference backend.

A ternarized model with random or post-hoc ternarized weights is for arithmetic
and timing: useful text needs a ternary-trained model (BitNet b1.58).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from edgespec.errors import ContextOverflowError
from edgespec.runtimes.fpga.cost import KV260, TELLME, Board, CostModel, Design, Shape
from edgespec.runtimes.fpga.tlmm import TERNARY_FILE, PackedTernary, load_packed, pack, ternarize, ternary_linear
from edgespec.runtimes.hf_tokenizer import HFTokenizer
from edgespec.runtimes.reference import ByteTokenizer, ReferenceModel, _rms, attend
from edgespec.speculative.backend import Backend, Tokenizer
from edgespec.speculative.clock import Clock


class TernaryModel:
    """A reference-architecture model with every block linear ternarized and packed for TLMM."""

    LINEARS = ("wq", "wk", "wv", "wo", "w1", "w2")

    def __init__(self, source: ReferenceModel, g: int = 3) -> None:
        self.d, self.n_layer, self.n_head, self.n_ctx = source.d, source.n_layer, source.n_head, source.n_ctx
        self.emb, self.pos, self.out, self.bias = source.emb, source.pos, source.out, source.bias
        self.layers: list[dict[str, PackedTernary]] = []
        for w in source.layers:
            packed = {}
            for name in self.LINEARS:
                wq, scale = ternarize(w[name].T)  # stored [in, out]; TLMM takes [out, in]
                packed[name] = pack(wq, g, scale)
            self.layers.append(packed)

    @property
    def shape(self) -> Shape:
        return Shape("ternary-reference", self.n_layer, self.d, self.layers[0]["w1"].shape[0], self.n_head,
                     self.n_head, self.out.shape[1], gated_ffn=False)

    def packed_bytes(self) -> int:
        return sum(p.nbytes_packed for layer in self.layers for p in layer.values())

    def float_bytes(self) -> int:
        return self.emb.nbytes + self.pos.nbytes + self.out.nbytes

    def new_cache(self, n_ctx: int) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((self.n_layer, n_ctx, self.d)), np.zeros((self.n_layer, n_ctx, self.d))

    def forward(self, ids: np.ndarray, p0: int, kc: np.ndarray, vc: np.ndarray) -> np.ndarray:
        """Hidden states after the last block for tokens at positions p0.., filling the caches."""
        n = len(ids)
        x = self.emb[ids] + self.pos[p0 : p0 + n]
        for li, w in enumerate(self.layers):
            h = np.stack([_rms(r) for r in x])
            q, k, v = (ternary_linear(h, w[name]) for name in ("wq", "wk", "wv"))
            kc[li, p0 : p0 + n], vc[li, p0 : p0 + n] = k, v
            # causal: position p0 + i sees the cache up to itself
            att = np.stack([attend(q[i], kc[li, : p0 + i + 1], vc[li, : p0 + i + 1], self.n_head) for i in range(n)])
            x = x + ternary_linear(att, w["wo"])
            h = np.stack([_rms(r) for r in x])
            x = x + ternary_linear(np.tanh(ternary_linear(h, w["w1"])), w["w2"])
        return x

    def logits(self, row: np.ndarray) -> np.ndarray:
        return _rms(row) @ self.out + self.bias


class TernaryLlama:
    """A llama or qwen2 checkpoint exported with `edgespec export --to ternary`: RMSNorm,
    rotary attention with grouped KV heads, SwiGLU, every block projection through
    TLMM; embeddings, norms and the LM head in float. Position by position the same
    arithmetic whatever the batch, so speculation on it is exactly lossless."""

    PROJ = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
            "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}

    def __init__(self, folder: str | os.PathLike) -> None:
        folder = Path(folder)
        cfg = json.loads((folder / "config.json").read_text())
        self.d, self.n_layer = cfg["hidden_size"], cfg["num_hidden_layers"]
        self.n_head = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_head
        self.hd = cfg.get("head_dim") or self.d // self.n_head
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.n_ctx = cfg.get("max_position_embeddings", 2048)
        self.d_ff = cfg["intermediate_size"]
        with np.load(folder / TERNARY_FILE) as z:
            f = lambda k: z[k].astype(np.float64)  # noqa: E731
            self.emb, self.final_norm = f("model.embed_tokens.weight"), f("model.norm.weight")
            self.head = f("lm_head.weight") if "lm_head.weight" in z.files else self.emb  # tied
            self.layers = []
            for i in range(self.n_layer):
                pre = f"model.layers.{i}."
                layer = {k: load_packed(z, pre + v + ".weight") for k, v in self.PROJ.items()}
                layer["attn_norm"], layer["ffn_norm"] = f(pre + "input_layernorm.weight"), f(pre + "post_attention_layernorm.weight")
                for b in "qkv":  # qwen2's attention biases
                    key = pre + self.PROJ[b] + ".bias"
                    layer[b + "_bias"] = f(key) if key in z.files else 0.0
                self.layers.append(layer)
        self.n_vocab = self.head.shape[0]
        self._inv_freq = 1.0 / self.theta ** (np.arange(0, self.hd, 2) / self.hd)

    @property
    def shape(self) -> Shape:
        return Shape("ternary-llama", self.n_layer, self.d, self.d_ff, self.n_head, self.n_kv, self.n_vocab)

    def packed_bytes(self) -> int:
        return sum(p.nbytes_packed for layer in self.layers for k, p in layer.items() if k in self.PROJ)

    def float_bytes(self) -> int:
        return self.emb.nbytes + (0 if self.head is self.emb else self.head.nbytes)

    def new_cache(self, n_ctx: int) -> tuple[np.ndarray, np.ndarray]:
        shape = (self.n_layer, n_ctx, self.n_kv, self.hd)
        return np.zeros(shape), np.zeros(shape)

    def _norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return np.stack([r / np.sqrt(np.mean(r * r) + self.eps) for r in x]) * w

    def _rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Hugging Face's rotate-half convention, as the checkpoint was trained with. x: [n, heads, hd]."""
        ang = pos[:, None] * self._inv_freq[None, :]
        cos, sin = np.cos(np.concatenate([ang, ang], 1))[:, None], np.sin(np.concatenate([ang, ang], 1))[:, None]
        half = self.hd // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rot * sin

    def forward(self, ids: np.ndarray, p0: int, kc: np.ndarray, vc: np.ndarray) -> np.ndarray:
        n = len(ids)
        pos = np.arange(p0, p0 + n, dtype=np.float64)
        group = self.n_head // self.n_kv
        x = self.emb[ids]
        for li, w in enumerate(self.layers):
            h = self._norm(x, w["attn_norm"])
            q = (ternary_linear(h, w["q"]) + w["q_bias"]).reshape(n, self.n_head, self.hd)
            k = (ternary_linear(h, w["k"]) + w["k_bias"]).reshape(n, self.n_kv, self.hd)
            v = (ternary_linear(h, w["v"]) + w["v_bias"]).reshape(n, self.n_kv, self.hd)
            q, k = self._rope(q, pos), self._rope(k, pos)
            kc[li, p0 : p0 + n], vc[li, p0 : p0 + n] = k, v
            att = np.empty((n, self.n_head, self.hd))
            for i in range(n):
                keys, vals = kc[li, : p0 + i + 1], vc[li, : p0 + i + 1]  # [ctx, kv, hd]
                for hh in range(self.n_head):
                    scores = keys[:, hh // group] @ q[i, hh] / np.sqrt(self.hd)
                    e = np.exp(scores - scores.max())
                    att[i, hh] = (e / e.sum()) @ vals[:, hh // group]
            x = x + ternary_linear(att.reshape(n, -1), w["o"])
            h = self._norm(x, w["ffn_norm"])
            gate = ternary_linear(h, w["gate"])
            x = x + ternary_linear(gate / (1.0 + np.exp(-gate)) * ternary_linear(h, w["up"]), w["down"])
        return x

    def logits(self, row: np.ndarray) -> np.ndarray:
        return self.head @ self._norm(row[None], self.final_norm)[0]


class BoardTime(Clock):
    """What a call would take on the board, per call: shared by the fpga-sim backend
    and BoardClock, each the clock of the engine that runs on it. `calls` logs (tokens,
    n_past, board seconds) of every eval."""

    cost: CostModel
    calls: list[tuple[int, int, float]]

    def _charge(self, n: int, n_past: int, n_logits: int) -> None:
        self.calls.append((n, n_past, self.cost.eval_cost(n, n_past, n_logits).seconds))

    @property
    def simulated_s(self) -> float:
        """Board time of every eval so far."""
        return sum(c[2] for c in self.calls)

    def seconds(self, n: int, n_past: int) -> float:
        return self.cost.eval_cost(n, n_past).seconds


class FpgaSimBackend(BoardTime, Backend):
    name = "fpga-sim"

    def __init__(self, model: TernaryModel | TernaryLlama, n_ctx: int | None = None, board: Board = KV260, design: Design = TELLME,
                 cost_shape: Shape | None = None, tokenizer: Tokenizer | None = None) -> None:
        """`cost_shape`: the model whose board time is simulated (default: this one's
        own shape); e.g. BITNET_0_73B to ask what TeLLMe's model would take."""
        self.model = model
        self.tokenizer = tokenizer or ByteTokenizer()
        self.n_ctx = min(n_ctx or model.n_ctx, model.n_ctx)
        self.cost = CostModel(board, design, cost_shape or model.shape)
        self._k, self._v = model.new_cache(self.n_ctx)
        self._n_past = 0
        self.calls = []

    @property
    def n_past(self) -> int:
        return self._n_past

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        n = len(ids)
        if not n:
            raise ValueError("eval needs at least one token")
        if self._n_past + n > self.n_ctx:
            raise ContextOverflowError(f"context full: {self._n_past} + {n} tokens exceed {self.n_ctx}")
        n_logits = n if n_logits is None else n_logits
        p0 = self._n_past
        x = self.model.forward(np.asarray(ids), p0, self._k, self._v)
        self._n_past += n
        self._charge(n, p0, n_logits)
        return np.array([self.model.logits(r) for r in x[n - n_logits :]], dtype=np.float32)

    def rollback(self, n_past: int) -> None:
        self._check_rollback(n_past)
        self._n_past = n_past

    def memory(self) -> dict[str, int]:
        m = self.model
        return {"weights": m.packed_bytes() + m.float_bytes(), "kv_cache": self._k.nbytes + self._v.nbytes}


class BoardClock(BoardTime, Backend):
    """Any backend, with a board's time added up per call: the model's numerics (and
    so the drafters' acceptance) come from `inner`, the seconds from the cycle model.
    How `edgespec bench --backend fpga-sim` turns acceptance measured on a real model
    into simulated figures for the board."""

    def __init__(self, inner: Backend, cost: CostModel) -> None:
        self.inner, self.cost = inner, cost
        self.name = f"{inner.name}@{cost.board.name}"
        self.tokenizer, self.n_ctx = inner.tokenizer, inner.n_ctx
        self.calls = []

    @property
    def n_past(self) -> int:
        return self.inner.n_past

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        p0 = self.inner.n_past
        out = self.inner.eval(ids, n_logits)
        self._charge(len(ids), p0, len(out))
        return out

    def rollback(self, n_past: int) -> None:
        self.inner.rollback(n_past)

    def memory(self) -> dict[str, int]:
        return self.inner.memory()

    def close(self) -> None:
        self.inner.close()


def open_ternary(folder: str | os.PathLike, n_ctx: int = 4096) -> FpgaSimBackend:
    """A `--to ternary` export on the fpga-sim backend, with its own tokenizer."""
    model = TernaryLlama(folder)
    return FpgaSimBackend(model, n_ctx=min(n_ctx, model.n_ctx), tokenizer=HFTokenizer(folder))

