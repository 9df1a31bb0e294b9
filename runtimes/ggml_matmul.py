"""One ggml matrix product on the CPU backend, through the ggml that llama-cpp-python loads.

The kernel tests and the kernel bench use it to run exactly what a model's weight multiply
runs: the weights quantized by ggml, placed either in a plain CPU buffer (the file's block
layout) or in the CPU backend's repacking buffer (the layout llama.cpp gives them at load on
this CPU), and multiplied by float activations on `threads` threads.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

TYPES = {"f32": 0, "q4_0": 2, "q8_0": 8, "q4_K": 12, "q5_K": 13, "q6_K": 14}
Q8_K = 15  # what the K-quants' products quantize their activations to

_vp, _i64, _sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", _sz), ("mem_buffer", _vp), ("no_alloc", ctypes.c_bool)]


class _FromFloat(ctypes.Structure):  # the head of ggml_type_traits_cpu: its float conversion
    _fields_ = [("from_float", ctypes.CFUNCTYPE(None, _vp, _vp, _i64))]


def _lib_dir() -> Path:
    """Where llama-cpp-python loads its shared libraries from (LLAMA_CPP_LIB_PATH first, as it does)."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        return Path(override)
    import llama_cpp

    return Path(llama_cpp.__file__).parent / "lib"


def _signatures(base: ctypes.CDLL, cpu: ctypes.CDLL) -> None:
    for lib, name, res, args in [
        (base, "ggml_init", _vp, [_InitParams]),
        (base, "ggml_free", None, [_vp]),
        (base, "ggml_new_tensor_2d", _vp, [_vp, ctypes.c_int, _i64, _i64]),
        (base, "ggml_mul_mat", _vp, [_vp, _vp, _vp]),
        (base, "ggml_new_graph", _vp, [_vp]),
        (base, "ggml_build_forward_expand", None, [_vp, _vp]),
        (base, "ggml_quantize_chunk", _sz, [ctypes.c_int, _vp, _vp, _i64, _i64, _i64, _vp]),
        (base, "ggml_row_size", _sz, [ctypes.c_int, _i64]),
        (base, "quantize_row_q8_K_ref", None, [_vp, _vp, _i64]),
        (base, "ggml_backend_alloc_ctx_tensors_from_buft", _vp, [_vp, _vp]),
        (base, "ggml_backend_tensor_set", None, [_vp, _vp, _sz, _sz]),
        (base, "ggml_backend_tensor_get", None, [_vp, _vp, _sz, _sz]),
        (base, "ggml_backend_graph_compute", ctypes.c_int, [_vp, _vp]),
        (base, "ggml_backend_buffer_free", None, [_vp]),
        (base, "ggml_backend_free", None, [_vp]),
        (base, "ggml_backend_cpu_buffer_type", _vp, []),
        (base, "ggml_backend_buft_name", ctypes.c_char_p, [_vp]),
        (base, "ggml_backend_reg_dev_get", _vp, [_vp, _sz]),
        (base, "ggml_backend_reg_get_proc_address", _vp, [_vp, ctypes.c_char_p]),
        (cpu, "ggml_backend_cpu_reg", _vp, []),
        (cpu, "ggml_backend_cpu_init", _vp, []),
        (cpu, "ggml_backend_cpu_set_n_threads", None, [_vp, ctypes.c_int]),
        (cpu, "ggml_get_type_traits_cpu", ctypes.POINTER(_FromFloat), [ctypes.c_int]),
    ]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


class Ggml:
    """The ggml libraries llama-cpp-python loads, with a CPU backend of `threads` threads."""

    def __init__(self, threads: int = 2) -> None:
        d = _lib_dir()
        self.base = ctypes.CDLL(str(d / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        self.cpu = ctypes.CDLL(str(d / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
        _signatures(self.base, self.cpu)
        self.backend = self.cpu.ggml_backend_cpu_init()
        self.cpu.ggml_backend_cpu_set_n_threads(self.backend, threads)

    def quantize(self, type_name: str, w: np.ndarray) -> bytes:
        """`w` (rows x K, float32) in ggml's block format for the type."""
        w = np.ascontiguousarray(w, np.float32)
        rows, k = w.shape
        code = TYPES[type_name]
        out = ctypes.create_string_buffer(self.base.ggml_row_size(code, k) * rows)
        n = self.base.ggml_quantize_chunk(code, w.ctypes.data, out, 0, rows, k, None)
        return out.raw[:n]

    def activations_q8_K(self, x: np.ndarray, reference: bool = False) -> bytes:
        """`x` (float32, a multiple of 256 values) as the Q8_K blocks a K-quant product multiplies:
        the CPU backend's conversion, or with `reference` ggml's scalar one."""
        x = np.ascontiguousarray(x, np.float32)
        out = ctypes.create_string_buffer(self.base.ggml_row_size(Q8_K, x.size))
        if reference:
            self.base.quantize_row_q8_K_ref(x.ctypes.data, out, x.size)
        else:
            self.cpu.ggml_get_type_traits_cpu(Q8_K).contents.from_float(x.ctypes.data, out, x.size)
        return out.raw

    def repack_buffer_type(self):
        """The CPU backend's repacking buffer type (None where this CPU has none)."""
        reg = self.cpu.ggml_backend_cpu_reg()
        get = self.base.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
        if not get:
            return None
        bufts = ctypes.CFUNCTYPE(ctypes.POINTER(_vp), _vp)(get)(self.base.ggml_backend_reg_dev_get(reg, 0))
        i = 0
        while bufts[i]:  # NULL-terminated: AMX's where built, then the repacking one
            if self.base.ggml_backend_buft_name(bufts[i]) == b"CPU_REPACK":
                return bufts[i]
            i += 1
        return None

    def close(self) -> None:
        if self.backend:
            self.base.ggml_backend_free(self.backend)
            self.backend = None


class MatMul:
    """weights (quantized, N x K) times activations (columns x K): one graph, run as often as asked."""

    def __init__(self, ggml: Ggml, type_name: str, weights: bytes, n: int, k: int, columns: int,
                 repacked: bool = False) -> None:
        self.g, b = ggml, ggml.base
        meta = _InitParams(1 << 20, None, True)
        self._wctx, self._ctx = b.ggml_init(meta), b.ggml_init(meta)
        self.w = b.ggml_new_tensor_2d(self._wctx, TYPES[type_name], k, n)
        self.x = b.ggml_new_tensor_2d(self._ctx, TYPES["f32"], k, columns)
        self.out = b.ggml_mul_mat(self._ctx, self.w, self.x)
        self.graph = b.ggml_new_graph(self._ctx)
        b.ggml_build_forward_expand(self.graph, self.out)
        buft = ggml.repack_buffer_type() if repacked else b.ggml_backend_cpu_buffer_type()
        if buft is None:
            raise RuntimeError("this CPU backend has no repacking buffer")
        self._bufs = [b.ggml_backend_alloc_ctx_tensors_from_buft(self._wctx, buft),
                      b.ggml_backend_alloc_ctx_tensors_from_buft(self._ctx, b.ggml_backend_cpu_buffer_type())]
        b.ggml_backend_tensor_set(self.w, weights, 0, len(weights))  # a repacking buffer repacks here
        self.shape = (columns, n)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        b = self.g.base
        x = np.ascontiguousarray(x, np.float32)
        b.ggml_backend_tensor_set(self.x, x.ctypes.data, 0, x.nbytes)
        if b.ggml_backend_graph_compute(self.g.backend, self.graph) != 0:
            raise RuntimeError("ggml could not compute the product")
        out = np.empty(self.shape, np.float32)
        b.ggml_backend_tensor_get(self.out, out.ctypes.data, 0, out.nbytes)
        return out

    def close(self) -> None:
        b = self.g.base
        for buf in self._bufs:
            b.ggml_backend_buffer_free(buf)
        self._bufs = []
        for ctx in (self._wctx, self._ctx):
            b.ggml_free(ctx)
        self._wctx = self._ctx = None
