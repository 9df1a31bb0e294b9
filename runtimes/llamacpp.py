"""The llama.cpp backend, on llama-cpp-python's low-level (ctypes) API.

Why not the high-level `Llama` class: with `logits_all=True` it keeps
n_ctx x n_vocab floats (about 1.2 GB for Qwen at a 2k context) to verify a few
draft tokens. Here each batch asks for logits only at the positions the
verifier reads, through llama_batch's per-token output flags.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import llama_cpp as ll
import numpy as np
import psutil

from edgespec.errors import ContextOverflowError, ModelError
from edgespec.models.facts import ModelFacts
from edgespec.runtimes.gpu.devices import gpu_layers, place, prepare
from edgespec.runtimes.kv_cache import KV_TYPES
from edgespec.runtimes.vocab_map import InputEmbedding, read_vocab_map
from edgespec.speculative.backend import Backend, Tokenizer

_GGML_LOG_ERROR = 4  # ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
_last_level = 0


@ll.llama_log_callback
def _log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama-cpp-python's own callback maps an older level enum and lets load-time
    # warnings through; keep llama.cpp quiet but for errors
    global _last_level
    if level != 5:
        _last_level = level
    if _last_level >= _GGML_LOG_ERROR:
        sys.stderr.write(text.decode("utf-8", errors="replace"))


_backend_ready = False
_KV_GGML_TYPE = {"f16": 1, "q8_0": 8, "q4_0": 2}  # ggml.h: GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0


def init_backend(device: str = "cpu") -> None:
    """Once per process: quiet logging, then the device setup (which the registry reads
    when it starts, inside llama_backend_init), then llama.cpp itself."""
    global _backend_ready
    if not _backend_ready:
        ll.llama_log_set(_log, ctypes.c_void_p(0))
        prepare(device)
        ll.llama_backend_init()
        _backend_ready = True


# install.sh's patch to llama.cpp (runtimes/patches): x86 kernels that multiply each weight block
# by every row of a small batch; this switch, read at each product, turns them off
SMALL_BATCH_SWITCH = "GGML_CPU_SMALL_BATCH"


def small_batch_kernels() -> bool:
    """Whether the installed llama.cpp was built with edgespec's small-batch kernels."""
    try:
        return "small-batch" in (Path(ll.__file__).parent / ".edgespec-build-patches").read_text()
    except OSError:
        return False


def small_batch_isa() -> str | None:
    """Which of the patches' kernel sets the loaded llama.cpp was compiled for, by its CPU features:
    "avx512-vnni" (AVX-512 F/BW/VL and VNNI), else "avx2", else None (no x86 kernels)."""
    info = ll.llama_print_system_info().decode(errors="replace")
    features = {part.split("=")[0].strip() for part in info.split("|") if part.strip().endswith("= 1")}
    if "AVX512" in features and "AVX512_VNNI" in features:
        return "avx512-vnni"
    return "avx2" if "AVX2" in features else None


@contextmanager
def environ(name: str, value: str) -> Iterator[None]:
    """The environment variable `name` set to `value` meanwhile, then as it was."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def llama_cpp_kernels_only():
    """llama.cpp's own kernels for small batches meanwhile (the bench's and the tests' comparison)."""
    return environ(SMALL_BATCH_SWITCH, "0")


def _build() -> str:
    """Which llama.cpp build computes, for the cost curve's key: install.sh's stamp (its key holds
    the patches), the libraries llama-cpp-python was pointed at, and the small-batch switch."""
    try:
        stamp = (Path(ll.__file__).parent / ".edgespec-build").read_text()
    except OSError:
        stamp = ""
    return f"{stamp}:{os.environ.get('LLAMA_CPP_LIB_PATH', '')}:{os.environ.get(SMALL_BATCH_SWITCH, '')}"


def default_threads() -> int:
    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)


class LlamaTokenizer(Tokenizer):
    def __init__(self, model: ll.llama_model_p, owner: object = None) -> None:
        self._model = model
        self._owner = owner  # the backend that frees the model: alive as long as its tokenizer is
        self._vocab = ll.llama_model_get_vocab(model)
        self.n_vocab = ll.llama_vocab_n_tokens(self._vocab)
        bos, eos = ll.llama_vocab_bos(self._vocab), ll.llama_vocab_eos(self._vocab)
        self.bos_id = bos if bos >= 0 else None
        self.eos_id = eos if eos >= 0 else None
        self.add_bos = bool(ll.llama_vocab_get_add_bos(self._vocab))
        self._pieces: dict[int, bytes] = {}
        self._buf = ctypes.create_string_buffer(256)

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos and self.add_bos, special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos and self.add_bos, special)
        return list(buf[:n])

    def _check(self, token: int) -> None:
        # llama.cpp indexes its vocabulary with .at(): an unknown id throws a C++
        # exception through the C API, which aborts the whole process
        if not 0 <= token < self.n_vocab:
            raise ValueError(f"token id {token} is outside the vocabulary (0..{self.n_vocab - 1})")

    def token_bytes(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            self._check(token)
            n = ll.llama_token_to_piece(self._vocab, token, self._buf, len(self._buf), 0, False)
            if n < 0:
                big = ctypes.create_string_buffer(-n)
                n = ll.llama_token_to_piece(self._vocab, token, big, len(big), 0, False)
                piece = big.raw[:n]
            else:
                piece = self._buf.raw[:n]
            self._pieces[token] = piece
        return piece

    def token_text(self, token: int) -> str:
        self._check(token)
        buf = ctypes.create_string_buffer(256)
        n = ll.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return bool(ll.llama_vocab_is_eog(self._vocab, token))

    def is_special(self, token: int) -> bool:
        return bool(ll.llama_vocab_is_control(self._vocab, token))

    @property
    def chat_template(self) -> str | None:
        t = ll.llama_model_chat_template(self._model, None)
        return t.decode("utf-8") if t else None


class LlamaCppBackend(Backend):
    """A GGUF model in llama.cpp with one sequence in its KV cache."""

    name = "llama.cpp"

    def __init__(
        self,
        model_path: str | os.PathLike,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        device: str = "cpu",
        n_gpu_layers: int | None = None,
        flash_attn: bool = False,
        kv_type: str = "f16",
        load: str = "mmap",
        n_outputs_max: int = 0,
    ) -> None:
        """flash_attn defaults to off, as in llama-cpp-python's `Llama`, so plain
        greedy output here is token for token what its users get. A quantized KV
        cache (`kv_type` q8_0 or q4_0) turns it on: llama.cpp needs it for a
        quantized V. `load="read"` copies the weights into memory instead of
        mapping the file: where llama.cpp repacks weights, mapping holds them twice
        (see footprint.py). `n_outputs_max` bounds the logits rows llama.cpp reserves per
        micro-batch (0: n_batch): a plan sets it to the longest draft plus one, since on a
        GPU the reservation is resident in full (311 MB for Qwen's vocabulary at n_batch 512).
        A call asking for more rows is split into several decodes (llama.cpp aborts otherwise).

        `device` is cpu, gpu, npu or auto (runtimes/gpu/devices.py): on a GPU, `n_gpu_layers`
        layers are offloaded (all by default; the memory planner may give fewer); where
        no GPU exists the model runs on the CPU and `notice` says why."""
        if kv_type not in _KV_GGML_TYPE:
            raise ValueError(f"unknown KV cache type {kv_type!r}; choose one of {', '.join(_KV_GGML_TYPE)}")
        if load not in ("mmap", "read"):
            raise ValueError(f"unknown load mode {load!r}; choose mmap or read")
        flash_attn = flash_attn or kv_type != "f16"
        init_backend(device)
        self.placement = place(device)
        self.notice = self.placement.notice
        self.path = Path(model_path)
        self._model = None
        self._ctx = None
        self._batch = self._batch_embd = None
        self.kv_type, self.load = kv_type, load
        self._load_model(n_ctx, n_gpu_layers, kv_type, load)
        self.tokenizer = LlamaTokenizer(self._model, owner=self)
        n_ctx_train = ll.llama_model_n_ctx_train(self._model)
        self.n_ctx = min(n_ctx, n_ctx_train) if n_ctx_train > 0 else n_ctx
        self.n_batch = n_batch
        self.n_threads = n_threads or default_threads()
        self.flash_attn = flash_attn
        self._new_context(n_batch, n_outputs_max, kv_type, flash_attn)
        self._n_past = 0
        self._max_outputs = 1
        self._read_shape()
        self.device = self.placement.label
        self.vocab_map, self.inputs_trimmed = read_vocab_map(self.path)  # a VocabTrim'd drafter
        self._input_embd = None
        if self.vocab_map is not None:
            self._attach_input_embedding(n_batch)

    def _load_model(self, n_ctx: int, n_gpu_layers: int | None, kv_type: str, load: str) -> None:
        mp = ll.llama_model_default_params()
        # a NULL-terminated list of the GPUs to use; empty keeps every layer and every
        # operation on the CPU (without it llama.cpp may still send large batches to a GPU)
        gpus = [d.handle for d in self.placement.gpus]
        self._devices = (ctypes.c_void_p * (len(gpus) + 1))(*gpus, None)
        mp.devices = ctypes.cast(self._devices, dict(ll.llama_model_params._fields_)["devices"])
        if gpus and n_gpu_layers is None:  # as many layers as the GPU's free memory holds
            n_gpu_layers = gpu_layers(ModelFacts.from_gguf(self.path), self.placement.gpus[0].free, n_ctx, kv_type)
        mp.n_gpu_layers = self._gpu_layers = n_gpu_layers if gpus else 0
        mp.load_mode = ll.LLAMA_LOAD_MODE_MMAP if load == "mmap" else ll.LLAMA_LOAD_MODE_NONE
        self._model = ll.llama_model_load_from_file(str(self.path).encode(), mp)
        if not self._model:
            raise ModelError(f"llama.cpp could not load {self.path} (corrupt, truncated or unsupported model)")

    def _read_shape(self) -> None:
        self.n_layer = ll.llama_model_n_layer(self._model)
        self.n_head = ll.llama_model_n_head(self._model)
        self.n_head_kv = ll.llama_model_n_head_kv(self._model)
        self.n_embd = ll.llama_model_n_embd(self._model)
        # llama.cpp offloads the output layer as one more "layer": n_layer + 1 is everything
        self.n_gpu_layers = min(self.n_layer + 1, self.n_layer + 1 if self._gpu_layers < 0 else self._gpu_layers)
        if self.placement.gpus and self.n_gpu_layers < self.n_layer + 1:
            more = f"{self.n_gpu_layers} of {self.n_layer + 1} layers fit in the GPU's free memory; the rest run on the CPU"
            self.notice = f"{self.notice}; {more}" if self.notice else more

    def _new_context(self, n_batch: int, n_outputs_max: int, kv_type: str, flash_attn: bool) -> None:
        cp = ll.llama_context_default_params()
        cp.n_ctx = self.n_ctx
        cp.n_batch = n_batch
        cp.n_outputs_max = n_outputs_max
        self._outputs_cap = n_outputs_max or n_batch  # eval splits batches that ask for more rows
        cp.n_ubatch = n_batch
        cp.n_seq_max = 1
        cp.n_threads = self.n_threads
        cp.n_threads_batch = self.n_threads
        cp.no_perf = True
        cp.type_k = cp.type_v = _KV_GGML_TYPE[kv_type]
        cp.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._ctx = ll.llama_init_from_model(self._model, cp)
        if not self._ctx:
            self.close()
            raise ModelError(f"llama.cpp could not create a context of {self.n_ctx} tokens for {self.path}")
        self.n_ctx = ll.llama_n_ctx(self._ctx)
        self._mem = ll.llama_get_memory(self._ctx)
        self._batch = ll.llama_batch_init(n_batch, 0, 1)

    def _attach_input_embedding(self, n_batch: int) -> None:
        """A VocabTrim'd GGUF with its full input embedding beside it takes full-vocabulary
        ids, fed to llama.cpp as embedding rows (its own vocabulary holds only the kept ids)."""
        self._input_embd = InputEmbedding.beside(self.path)
        if self._input_embd is None:
            return
        if self._input_embd.n_embd != self.n_embd:
            self.close()
            raise ModelError(f"{self.path.parent}: input_embd.gguf has rows of {self._input_embd.n_embd}, "
                             f"the model {self.n_embd}")
        self.inputs_trimmed = False
        self._batch_embd = ll.llama_batch_init(n_batch, self.n_embd, 1)
        self._embd_rows = np.ctypeslib.as_array(self._batch_embd.embd, shape=(n_batch * self.n_embd,))

    # -- Backend --------------------------------------------------------------

    @property
    def n_past(self) -> int:
        return self._n_past

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        n = len(ids)
        if n == 0:
            raise ValueError("eval needs at least one token")
        n_logits = n if n_logits is None else n_logits
        if self._n_past + n > self.n_ctx:
            raise ContextOverflowError(
                f"context full: {self._n_past} + {n} tokens exceed the context of {self.n_ctx}"
            )
        first_out = n - n_logits
        chunks = []
        embd = self._input_embd
        if embd is not None:
            embd.check(ids)  # before any chunk is decoded: a failure then leaves the cache as it was
        b = self._batch if embd is None else self._batch_embd
        start = 0
        while start < n:
            end = min(n, start + self.n_batch)
            if end - max(start, first_out) > self._outputs_cap:  # llama.cpp aborts past its reservation
                end = max(start, first_out) + self._outputs_cap
            if embd is not None:
                rows = embd.rows(ids[start:end]).ravel()
                self._embd_rows[: rows.size] = rows
            for j, i in enumerate(range(start, end)):
                if embd is None:
                    b.token[j] = ids[i]
                b.pos[j] = self._n_past + i
                b.n_seq_id[j] = 1
                b.seq_id[j][0] = 0
                b.logits[j] = i >= first_out
            b.n_tokens = end - start
            rc = ll.llama_decode(self._ctx, b)
            if rc != 0:
                # drop whatever earlier chunks of this call left in the cache
                ll.llama_memory_seq_rm(self._mem, 0, self._n_past, -1)
                raise RuntimeError(f"llama_decode failed with code {rc}")
            outs = max(0, end - max(start, first_out))
            if outs:
                self._max_outputs = max(self._max_outputs, outs)
                ptr = ll.llama_get_logits(self._ctx)
                rows = np.ctypeslib.as_array(ptr, shape=(outs, self.tokenizer.n_vocab))
                chunks.append(rows if end == n else rows.copy())  # the next decode overwrites llama.cpp's buffer
            start = end
        self._n_past += n
        if len(chunks) == 1:
            return chunks[0]
        return np.concatenate(chunks) if chunks else np.empty((0, self.tokenizer.n_vocab), np.float32)

    def rollback(self, n_past: int) -> None:
        self._check_rollback(n_past)
        if n_past < self._n_past:
            if not ll.llama_memory_seq_rm(self._mem, 0, n_past, -1):
                raise RuntimeError("llama.cpp refused to remove a partial sequence from the KV cache")
        self._n_past = n_past

    def set_threads(self, n: int) -> bool:
        if self.device != "CPU":  # offloaded layers do not run on the thread pool
            return False
        ll.llama_set_n_threads(self._ctx, n, n)
        self.n_threads = n
        return True

    def cost_key(self) -> str:
        st = self.path.stat()
        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        except OSError:
            cpu = platform.processor()
        info = ll.llama_print_system_info().decode(errors="replace")
        return "|".join(map(str, [self.path.resolve(), st.st_size, st.st_mtime_ns, self.n_threads, self.n_batch,
                                  self.flash_attn, self.kv_type, self.load, ll.__version__, info, cpu, platform.node(),
                                  self.device, self.n_gpu_layers, _build()]))

    def kv_bytes_per_token(self) -> int:
        head_dim = self.n_embd // max(1, self.n_head)
        return int(self.n_layer * 2 * self.n_head_kv * head_dim * KV_TYPES[self.kv_type])  # K and V

    def memory(self) -> dict[str, int]:
        return {
            "weights": int(ll.llama_model_size(self._model)),
            "kv_cache": self.kv_bytes_per_token() * self.n_ctx,
            "logits": self._max_outputs * self.tokenizer.n_vocab * 4,
        }

    def close(self) -> None:
        for batch in (self._batch, self._batch_embd):
            if batch is not None:
                ll.llama_batch_free(batch)
        self._batch = self._batch_embd = None
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
