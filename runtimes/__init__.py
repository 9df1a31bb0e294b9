"""Backends: llama.cpp (GGUF), ONNX Runtime (ONNX exports), and the numpy reference."""

from __future__ import annotations

import os

from edgespec.errors import ModelError
from edgespec.models.store import model_file
from edgespec.speculative.backend import Backend


def open_backend(path: str | os.PathLike, n_ctx: int = 4096, threads: int | None = None, device: str = "cpu",
                 ep_options: dict[str, str] | None = None, **llama_options) -> Backend:
    """The backend that runs this model: ONNX exports on ONNX Runtime, GGUF on llama.cpp.

    `device` (cpu, gpu, npu, auto) picks llama.cpp's GPU or ONNX Runtime's execution
    provider; where none exists the model runs on the CPU and the backend's `notice` says
    so. `ep_options` go to the chosen execution provider. `llama_options` (kv_type,
    n_batch, load, n_gpu_layers: a memory plan's choices) go to llama.cpp."""
    f = model_file(path)
    if f.suffix.lower() == ".onnx":
        if llama_options:
            raise ModelError(f"{f} is an ONNX model: memory plans ({', '.join(llama_options)}) apply to GGUF models")
        from edgespec.runtimes.gpu.devices import onnx_providers
        from edgespec.runtimes.onnxruntime import OnnxBackend

        placed = onnx_providers(device, options=ep_options, threads=threads)
        backend = OnnxBackend(f, n_ctx=n_ctx, n_threads=threads, providers=placed.providers)
        backend.notice = placed.notice
        return backend
    if ep_options:
        raise ModelError(f"{f} is not an ONNX model: --ep-option applies to ONNX Runtime's execution providers")
    if f.name.endswith(".ternary.npz"):  # `export --to ternary`: runs on the FPGA simulation
        if llama_options:
            raise ModelError(f"{f} is a ternary export: memory plans ({', '.join(llama_options)}) apply to GGUF models")
        if device != "cpu":
            raise ModelError(f"{f} is a ternary export: it runs on the FPGA simulation, not on --device {device}")
        from edgespec.runtimes.fpga.sim import open_ternary

        return open_ternary(f.parent, n_ctx=n_ctx)
    from edgespec.runtimes.llamacpp import LlamaCppBackend

    return LlamaCppBackend(f, n_ctx=n_ctx, n_threads=threads, device=device, **llama_options)
