"""The ONNX Runtime backend: a decoder exported with its KV cache (optimum's
`text-generation-with-past` layout) that returns logits for every input position.

The KV cache of an export made by `edgespec export` is written in place: each
layer's attention is one com.microsoft.GroupQueryAttention node
(export/onnx_attention.py), and one preallocated buffer per layer, as long as the
context, is bound (IO binding) as both its `past_key_values.*` input and its
`present.*` output. A run writes its own rows and copies nothing else; rolling back
is a smaller `seqlens_k` next run, and the rejected rows are overwritten.

Older exports (optimum's layout as it comes) concatenate past and new rows into a
fresh `present` every run, ONNX Runtime's own buffers handed to numpy without a
copy. Evaluating k draft tokens is one run with a k-token `input_ids`. Rolling back
copies nothing at first: the rejected rows stay in the cache, masked out by
`attention_mask`, and the tokens after them take their positions from
`position_ids`. Copying the kept prefix on every rejection would cost as much as
the verification itself (a fresh array the size of the cache pages in), so the cache
is compacted once the masked rows pass an eighth of it (and 64 rows).
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Sequence

import numpy as np

from edgespec.errors import ContextOverflowError, ModelError
from edgespec.runtimes.hf_tokenizer import HFTokenizer
from edgespec.runtimes.vocab_map import read_vocab_map
from edgespec.speculative.backend import Backend

_NP_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32}


# inputs of an export whose attention writes a preallocated cache in place (GroupQueryAttention)
SEQLENS = "seqlens_k"  # per sequence: tokens in the cache after this run, minus one
TOTAL = "total_sequence_length"  # tokens in the cache after this run
PREFILL_CHUNK = 256  # input rows per run where only the last rows' logits are wanted


def sliding_window(config: dict) -> bool:
    """Whether a model's attention (its config.json, as a dict) is limited to a window;
    Qwen2 configs name a window they do not use."""
    return bool(config.get("sliding_window") and config.get("use_sliding_window", True))


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
        from edgespec.runtimes.llamacpp import default_threads

        self.path = Path(model_path)
        if not self.path.is_file():
            raise ModelError(f"no such ONNX model: {self.path}")
        folder = self.path.parent
        self.tokenizer = HFTokenizer(folder)
        self._providers = list(providers or ["CPUExecutionProvider"])
        self._open(n_threads or default_threads())
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
        self._masks_rollback = self._has_mask and self._has_pos and not sliding_window(cfg)
        self._in_place = SEQLENS in inputs  # GroupQueryAttention over a preallocated cache
        self._reset_kv()
        self._max_outputs = 1

    def _open(self, n_threads: int) -> None:
        """Build the session, its intra-op pool `n_threads` wide."""
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = self.n_threads = n_threads
        so.inter_op_num_threads = 1
        # ONNX Runtime's idle threads spin after a run, by default long enough to take the
        # cores from whatever runs next: a drafter's session, llama.cpp, the drafting
        # code; 100 us is enough to keep its own next run warm (docs/design.md)
        so.add_session_config_entry("session.intra_op.spin_duration_us", "100")
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._sess = ort.InferenceSession(str(self.path), so, providers=self._providers)
        except Exception as e:  # onnxruntime raises its own untyped errors for bad graphs
            raise ModelError(f"ONNX Runtime could not load {self.path}: {str(e).splitlines()[0]}") from None

    def set_threads(self, n: int) -> bool:
        """A session's thread pool is fixed when it is built, so another count builds the
        session again (the time of a load, once per change) over the same cache, whose
        buffers are this backend's own. Other providers than the CPU's have no such pool."""
        if self.device != "CPU":
            return False
        if n != self.n_threads:
            self._sess = self._io = None  # the old session's weights go before the new ones load
            self._open(n)
            if self._in_place:
                self._bind_kv()
        return True

    def _reset_kv(self) -> None:
        self._n_past = 0
        self._live = np.zeros(0, np.int64)  # per cache row: 1 if it holds a kept token, 0 if rolled back
        if self._in_place:
            import onnxruntime as ort

            # zeroed pages are only touched (resident) as rows are written
            shape = (1, self.n_head_kv, self.n_ctx, self.head_dim)
            self._kv = [ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, self._kv_dtype)) for _ in self._past_names]
            self._bind_kv()
            return
        shape = (1, self.n_head_kv, 0, self.head_dim)
        self._kv = [np.zeros(shape, self._kv_dtype) for _ in self._past_names]

    def _bind_kv(self) -> None:
        """Each layer's cache buffer, bound as both its past input and its present output."""
        self._io = self._sess.io_binding()
        self._io.bind_output("logits")  # first: outputs come back in binding order; rebound every run
        for past, present, buf in zip(self._past_names, self._present_names, self._kv):
            self._io.bind_ortvalue_input(past, buf)
            self._io.bind_ortvalue_output(present, buf)

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
        # the graph returns logits for every input row: a long prompt is read in chunks
        # so that only the last chunk's rows are ever held (151k floats each for Qwen)
        head = max(0, n - max(n_logits, PREFILL_CHUNK))
        for i in range(0, head, PREFILL_CHUNK):
            self._run(ids[i : min(i + PREFILL_CHUNK, head)])
        out = self._run(ids[head:])
        logits = out[0, len(out[0]) - n_logits :]
        return logits if logits.dtype == np.float32 else logits.astype(np.float32)

    def _run(self, ids: Sequence[int]) -> np.ndarray:
        self._max_outputs = max(self._max_outputs, len(ids))
        out = self._eval_in_place(ids) if self._in_place else self._eval_concat(ids)
        self._n_past += len(ids)
        return out

    def _eval_concat(self, ids: Sequence[int]) -> np.ndarray:
        """An older export: the cache comes back as the run's `present` outputs."""
        n = len(ids)
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
        return outs[0]

    def _eval_in_place(self, ids: Sequence[int]) -> np.ndarray:
        io, total = self._io, self._n_past + len(ids)
        io.bind_cpu_input("input_ids", np.asarray([ids], dtype=np.int64))
        if self._has_pos:
            io.bind_cpu_input("position_ids", np.arange(self._n_past, total, dtype=np.int64)[None])
        if self._has_mask:  # only if something besides attention still reads it
            io.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        io.bind_cpu_input(SEQLENS, np.array([total - 1], np.int32))
        io.bind_cpu_input(TOTAL, np.array(total, np.int32))
        io.bind_output("logits")  # unallocated: the last run's logits had their own length
        self._sess.run_with_iobinding(io)
        return io.get_outputs()[0].numpy()

    def rollback(self, n_past: int) -> None:
        self._check_rollback(n_past)
        if n_past >= self._n_past:
            return
        if self._in_place:  # the next run writes over the rejected rows
            self._n_past = n_past
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
            # reserved for the whole context in place, else as grown (rolled-back rows included)
            "kv_cache": self.kv_bytes_per_token() * (self.n_ctx if self._in_place else len(self._live)),
            "logits": self._max_outputs * self.n_vocab * 4,
        }

    def cost_key(self) -> str:
        import onnxruntime as ort

        st = self.path.stat()
        return "|".join(map(str, ["onnx", self.path.resolve(), st.st_size, st.st_mtime_ns, self.n_threads,
                                  ",".join(self.providers), ort.__version__, platform.processor(), platform.node()]))

    def close(self) -> None:
        self._sess = None
        self._io = None
        self._kv = []


def _layer_order(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return (int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0, parts[-1])


def _static(dim: object) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None
