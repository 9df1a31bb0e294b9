"""The ONNX Runtime backend: a decoder exported with its KV cache (optimum's
`text-generation-with-past` layout) that returns logits for every input position.

The KV cache lives between runs in the `present` outputs of the last one. They are
ONNX Runtime's own buffers: onnxruntime 1.32's `run` hands outputs to numpy without
a copy (each array's base is the OrtValue) and reads numpy inputs in place, so
nothing here copies the cache between steps. IO binding (each `present` bound as
the next `past`) was measured against this on SmolLM2-135M fp32, alternating in one
process: no faster on 5-token verification, slower on 1-token decode (0.73x the
speed at context 64, 0.93x at 2048). What does copy the cache every run is the graph.
optimum's layout concatenates past and new rows (Concat) and repeats the KV heads
for grouped-query attention (Expand); at context 2048 the graph's Concat and Expand
nodes took 59 of 108 ms of a decode run in ONNX Runtime's profiler. `edgespec export`
folds the repeated heads away (export/onnx_attention.py). The Concat stays: removing
it needs an in-place cache and a fused GroupQueryAttention, which onnxruntime's
transformer optimizer does not make of optimum's llama graph (it fuses the rotary
embedding only).

Evaluating k draft tokens is one run with a k-token `input_ids`. Rolling back
copies nothing at first: the rejected rows stay in the cache, masked out by
`attention_mask`, and the tokens after them take their positions from
`position_ids`. Copying the kept prefix on every
rejection measured half of a 5-token verification step at context 2048 on
SmolLM2-135M int8 (58 of 114 ms: a fresh 90 MB array pages in). The cache is
compacted once the masked rows pass an eighth of it (and 64 rows).
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Sequence

import numpy as np

from ..backend import Backend
from ..errors import ContextOverflowError, ModelError
from ..export.vocabtrim import read_vocab_map
from .hf_tokenizer import HFTokenizer

_NP_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32}


class OnnxBackend(Backend):
    """One sequence on an ONNX Runtime session; CPU unless other providers are given."""

    name = "onnxruntime"

    def __init__(
        self,
        model_path: str | os.PathLike,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        providers: Sequence[str | tuple[str, dict]] | None = None,
    ) -> None:
        import onnxruntime as ort

        from .llamacpp import default_threads

        self.path = Path(model_path)
        if not self.path.is_file():
            raise ModelError(f"no such ONNX model: {self.path}")
        folder = self.path.parent
        self.tokenizer = HFTokenizer(folder)
        self.n_threads = n_threads or default_threads()
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.n_threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._sess = ort.InferenceSession(str(self.path), so, providers=list(providers or ["CPUExecutionProvider"]))
        except Exception as e:  # onnxruntime raises its own untyped errors for bad graphs
            raise ModelError(f"ONNX Runtime could not load {self.path}: {str(e).splitlines()[0]}") from None
        self.providers = self._sess.get_providers()
        self.device = self.providers[0].removesuffix("ExecutionProvider")
        inputs = {i.name: i for i in self._sess.get_inputs()}
        self._past_names = sorted((n for n in inputs if n.startswith("past_key_values.")), key=_layer_order)
        self._present_names = ["present." + n[len("past_key_values."):] for n in self._past_names]
        if "input_ids" not in inputs or not self._past_names:
            raise ModelError(f"{self.path} is not a decoder with a KV cache (export with text-generation-with-past)")
        self._has_pos = "position_ids" in inputs
        self._has_mask = "attention_mask" in inputs
        self._cache_branch = "use_cache_branch" in inputs
        first = inputs[self._past_names[0]]
        self._kv_dtype = _NP_TYPES.get(first.type, np.float32)
        cfg_path = folder / "config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        self.n_head_kv = _static(first.shape[1]) or cfg.get("num_key_value_heads") or cfg.get("num_attention_heads")
        self.head_dim = _static(first.shape[3]) or (cfg["hidden_size"] // cfg["num_attention_heads"])
        self.n_layer = len(self._past_names) // 2
        n_ctx_train = int(cfg.get("max_position_embeddings") or n_ctx)
        self.n_ctx = min(n_ctx, n_ctx_train)
        self.vocab_map, self.inputs_trimmed = read_vocab_map(self.path)  # a VocabTrim'd drafter
        # masking rolled-back rows needs positions from position_ids; a sliding window counts
        # cache rows, masked ones too, so such models copy on every rollback instead
        sliding = cfg.get("sliding_window") and cfg.get("use_sliding_window", True)
        self._masks_rollback = self._has_mask and self._has_pos and not sliding
        self._reset_kv()
        self._max_outputs = 1

    def _reset_kv(self) -> None:
        shape = (1, self.n_head_kv, 0, self.head_dim)
        self._kv = [np.zeros(shape, self._kv_dtype) for _ in self._past_names]
        self._n_past = 0
        self._live = np.zeros(0, np.int64)  # per cache row: 1 if it holds a kept token, 0 if rolled back

    @property
    def n_past(self) -> int:
        return self._n_past

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        n = len(ids)
        if n == 0:
            raise ValueError("eval needs at least one token")
        if self._n_past + n > self.n_ctx:
            raise ContextOverflowError(f"context full: {self._n_past} + {n} tokens exceed the context of {self.n_ctx}")
        n_logits = n if n_logits is None else n_logits
        if len(self._live) + n > self.n_ctx:  # masked rows never take the cache past the context
            self._compact()
        feed: dict[str, np.ndarray] = {"input_ids": np.asarray([ids], dtype=np.int64)}
        live = np.concatenate([self._live, np.ones(n, np.int64)])
        if self._has_mask:
            feed["attention_mask"] = live[None]
        if self._has_pos:
            feed["position_ids"] = np.arange(self._n_past, self._n_past + n, dtype=np.int64)[None]
        if self._cache_branch:
            feed["use_cache_branch"] = np.array([len(self._live) > 0])
        feed.update(zip(self._past_names, self._kv))
        outs = self._sess.run(["logits", *self._present_names], feed)
        self._kv = outs[1:]
        self._live = live
        self._n_past += n
        self._max_outputs = max(self._max_outputs, n)
        logits = outs[0][0, n - n_logits :]
        return logits if logits.dtype == np.float32 else logits.astype(np.float32)

    def rollback(self, n_past: int) -> None:
        self._check_rollback(n_past)
        if n_past >= self._n_past:
            return
        # the rolled-back tokens are the last live rows: mask them
        self._live[np.flatnonzero(self._live)[n_past:]] = 0
        self._n_past = n_past
        stale = len(self._live) - n_past
        if n_past == 0 or not self._masks_rollback or stale > max(64, len(self._live) // 8):
            self._compact()

    def _compact(self) -> None:
        """Drop the masked rows (ONNX Runtime needs contiguous inputs, so this copies)."""
        if self._n_past == len(self._live):
            return
        keep = np.flatnonzero(self._live)
        self._kv = [np.take(kv, keep, axis=2) for kv in self._kv]  # a new contiguous array
        self._live = np.ones(len(keep), np.int64)

    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layer * self.n_head_kv * self.head_dim * np.dtype(self._kv_dtype).itemsize

    def memory(self) -> dict[str, int]:
        weights = self.path.stat().st_size
        data = self.path.with_name(self.path.name + "_data")
        if data.is_file():
            weights += data.stat().st_size
        return {
            "weights": weights,
            "kv_cache": self.kv_bytes_per_token() * len(self._live),  # rolled-back rows included
            "logits": self._max_outputs * self.n_vocab * 4,
        }

    def cost_key(self) -> str:
        import onnxruntime as ort

        st = self.path.stat()
        return "|".join(map(str, ["onnx", self.path.resolve(), st.st_size, st.st_mtime_ns, self.n_threads,
                                  ",".join(self.providers), ort.__version__, platform.processor(), platform.node()]))

    def close(self) -> None:
        self._sess = None
        self._kv = []


def _layer_order(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return (int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0, parts[-1])


def _static(dim: object) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None
