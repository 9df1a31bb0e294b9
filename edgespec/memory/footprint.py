"""The memory model: bytes a llama.cpp configuration will hold, predicted from
the GGUF file's own facts, before anything is loaded.

What it counts (the measurements it was built from: docs/design.md, "The memory model"):

- Weights. With mmap (llama.cpp's default) the whole file becomes resident as
  file pages, and tensors llama.cpp repacks for its x86 GEMM kernels (Q4_0, Q4_K,
  IQ4_NL matmul weights with rows in multiples of 8) are copied into anonymous
  memory besides. Read into memory instead (load mode "read"), weights cost their
  tensor bytes once, whatever is repacked.
- KV cache: every layer's K and V rows for the context, which llama.cpp pads to
  a multiple of 256 and clears at creation (so it is all resident at once).
  Sliding-window layers (Gemma 3) hold the full context too: llama.cpp's default
  full-size SWA cache, which rolling back a rejected draft needs.
- Vocabulary: llama.cpp's token and merge tables, about 165 bytes per entry.
- Compute: llama.cpp reserves a graph buffer for a full micro-batch, mostly the
  logits of every position, but pages are touched only as used: the largest
  micro-batch's activations (three feed-forward rows and a few embedding rows
  per token, plus the attention scores over the cache without flash attention)
  and the logits of the rows actually requested.
- Logits: a verification of k draft tokens asks for k + 1 rows, held twice (the
  graph's output tensor and the context's output buffer).
- Drafter tables: the model-free drafters' own bounds (`Registered.table_bytes`, drafters/registry.py).
- Runtime: code and modules paged in when the first model loads, once per process.

Everything here is pure arithmetic over `ModelFacts`; the planner searches it.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field, replace

import psutil

from edgespec.drafters.registry import PLAIN, DrafterSpec
from edgespec.models.facts import ModelFacts
from edgespec.runtimes.kv_cache import KV_TYPES

CTX_PAD = 256
VOCAB_ENTRY_BYTES = 165  # llama.cpp's token and merge tables, per entry (measured: docs/design.md)
RUNTIME_BYTES = 12_000_000  # paged in on first use: llama.cpp's code, the modules loading imports (measured)
# What a GPU driver adds in the process as kernels first run, beyond llama.cpp's buffers:
# compiled shader pipelines, one per weight type and batch width (ggml-vulkan's matrix-vector
# kernels take 1 to 8 columns). A rough estimate for predictions without a budget (a line
# through two lavapipe measurements with every layer offloaded); budgets are planned from
# the driver's memory measured on the machine (driver_memory.py). Its start-up is in the baseline.
GPU_DRIVER_FIXED = 68_000_000
GPU_DRIVER_PER_WEIGHT_BYTE = 0.9


@dataclass(frozen=True)
class ModelConfig:
    """How one model is run: what its footprint depends on besides the file."""

    n_ctx: int = 4096
    kv_type: str = "f16"
    n_batch: int = 512
    load: str = "mmap"  # "mmap" (llama.cpp's default) or "read" (weights copied into memory once)
    flash_attn: bool = False
    max_outputs: int = 1  # logits rows asked for in one batch (draft length + 1)
    prefill: int = 512  # the longest prompt chunk's reach into the cache (bounds attention scores)
    n_outputs_max: int = 0  # logits rows llama.cpp reserves per micro-batch (0: n_batch, its default)
    gpu_layers: int = 0  # llama.cpp's n_gpu_layers: the output layer, then the last blocks (n_layer + 1: all)


def padded_ctx(n_ctx: int) -> int:
    return -(-n_ctx // CTX_PAD) * CTX_PAD


@functools.lru_cache(maxsize=None)
def repacks_here() -> bool:
    """True where llama.cpp's CPU backend repacks 4-bit weights (x86 with AVX2)."""
    try:
        import llama_cpp as ll

        from edgespec.runtimes.llamacpp import init_backend

        init_backend()  # the system info starts llama.cpp's devices: set up the process's first
        return "AVX2 = 1" in ll.llama_print_system_info().decode(errors="replace")
    except Exception:
        return False


def model_bytes(m: ModelFacts, c: ModelConfig, repack: bool | None = None) -> dict[str, int]:
    """Predicted resident bytes of one loaded model, by component; `gpu_*` components
    live in the GPU's memory (which is the system's RAM on an integrated or software GPU).

    Offloaded, what changes (measured on Vulkan, lavapipe): a GPU's buffers are resident
    in full once used, so its compute buffer counts at its reservation, which holds the
    logits of `n_outputs_max` rows; the input embedding stays on the host, and a tied LM
    head gets a second copy on the GPU; the host keeps the mask and the output buffer."""
    if c.kv_type not in KV_TYPES:
        raise ValueError(f"unknown KV cache type {c.kv_type!r}; choose one of {', '.join(KV_TYPES)}")
    repack = repacks_here() if repack is None else repack
    n_ctx = padded_ctx(c.n_ctx)
    per_cell = m.n_head_kv * (m.head_k + m.head_v) * KV_TYPES[c.kv_type]
    kv = per_cell * m.n_layer * n_ctx  # sliding-window layers too: llama.cpp's default full-size SWA cache
    nb = max(1, min(c.n_batch, c.prefill))
    reach = min(n_ctx, max(c.prefill, c.max_outputs))
    act = nb * (3 * m.n_ff + 4 * m.n_embd) * 4
    if not c.flash_attn:
        act += nb * reach * (m.n_head + 1) * 4  # scores and mask, f32
    # llama.cpp offloads the output layer first, then the last blocks: n_gpu_layers = 1 is
    # the LM head alone, n_layer + 1 is everything (llama-model.cpp, i_gpu_start)
    share = max(0, min(c.gpu_layers, m.n_layer + 1) - 1) / m.n_layer  # of the blocks, offloaded
    head_on_gpu = c.gpu_layers >= 1
    blocks = max(0, m.tensor_bytes - m.embd_bytes - m.output_bytes)
    gpu_weights = blocks * share + ((m.output_bytes or m.embd_bytes) if head_on_gpu else 0)
    host_weights = m.tensor_bytes - blocks * share - (m.output_bytes if head_on_gpu else 0)
    mapped = host_weights * m.file_bytes / max(1, m.tensor_bytes) if c.load == "mmap" else 0  # offloaded ranges are unmapped
    resident = (m.repack_bytes * (1 - share) if repack else 0) if c.load == "mmap" else host_weights
    logit_rows = max(1, c.max_outputs)
    parts = {
        "weights_mapped": int(mapped),
        "weights_resident": int(resident),
        "vocab": int(VOCAB_ENTRY_BYTES * m.n_tokens),
        "kv_cache": int(kv * (1 - share)),
        "compute": int(act * (1 - share) + (nb * reach * 4 if share else 0)),
        "logits": int((1 if head_on_gpu else 2) * logit_rows * m.n_vocab * 4),
    }
    if c.gpu_layers > 0:
        reserved_rows = min(nb, c.n_outputs_max or c.n_batch)
        parts.update({
            "gpu_weights": int(gpu_weights),
            "gpu_kv_cache": int(kv * share),
            # one buffer reused layer after layer: the largest of a layer's activations and the logits
            "gpu_compute": int(max(act if share else 0, reserved_rows * m.n_vocab * 4 if head_on_gpu else 0)),
        })
    return parts


@dataclass
class Footprint:
    """A predicted footprint: bytes by component, and the process baseline."""

    components: dict[str, int] = field(default_factory=dict)
    baseline: int = 0  # the process before any model (interpreter, libraries): measured, not predicted
    device: dict[str, int] = field(default_factory=dict)  # a discrete GPU's own memory: not in the total

    @property
    def total(self) -> int:
        return self.baseline + sum(self.components.values())

    @property
    def gpu_bytes(self) -> int:
        """What the GPU's memory holds, whether or not that memory is the process's."""
        return sum(v for k, v in {**self.components, **self.device}.items() if in_gpu_memory(k))

    def add(self, prefix: str, parts: dict[str, int]) -> None:
        for k, v in parts.items():
            self.components[f"{prefix}{k}"] = self.components.get(f"{prefix}{k}", 0) + v

    def to_dict(self) -> dict:
        d = {"baseline": self.baseline, **self.components, "total": self.total}
        return {**d, "device": dict(self.device)} if self.device else d


def predict(target: ModelFacts, cfg: ModelConfig, drafter: str = PLAIN, drafter_model: ModelFacts | None = None,
            drafter_cfg: ModelConfig | None = None, baseline: int = 0, repack: bool | None = None,
            gpu_shares_ram: bool = True, gpu_driver: int | None = None) -> Footprint:
    """The whole process: target, drafter model (if any), drafter tables, baseline.
    With layers offloaded, the GPU's buffers count in the total where the GPU shares the
    system's RAM (integrated and software GPUs); a discrete GPU's go to `device`.
    `gpu_driver` is the driver's own memory as measured (driver_memory.py) for a process
    that uses a GPU, offloaded layers or not (llama.cpp still sends large batches to it);
    without it, a rough estimate counts when layers are offloaded."""
    fp = Footprint(baseline=baseline)
    fp.components["runtime"] = RUNTIME_BYTES
    fp.add("", model_bytes(target, cfg, repack))
    if drafter_model is not None:
        full = cfg.gpu_layers > target.n_layer  # "all layers" reaches the drafter as all of its own
        dcfg = drafter_cfg or replace(cfg, max_outputs=1,
                                      gpu_layers=drafter_model.n_layer + 1 if full else cfg.gpu_layers)
        fp.add("drafter_", model_bytes(drafter_model, dcfg, repack))
    tables = DrafterSpec.parse(drafter).table_bytes(target.n_vocab, cfg.n_ctx)
    if tables:
        fp.components["drafter_tables"] = tables
    on_gpu = [k for k in fp.components if in_gpu_memory(k)]
    if gpu_driver is not None:
        fp.components["gpu_driver"] = gpu_driver
    elif on_gpu:
        offloaded = sum(v for k, v in fp.components.items() if k.endswith("gpu_weights"))
        fp.components["gpu_driver"] = int(GPU_DRIVER_FIXED + GPU_DRIVER_PER_WEIGHT_BYTE * offloaded)
    if on_gpu and not gpu_shares_ram:
        fp.device = {k: fp.components.pop(k) for k in on_gpu}
    return fp


def in_gpu_memory(component: str) -> bool:
    """Whether a footprint component lives in a GPU's memory: the target's or a drafter
    model's `gpu_*` buffers; the driver's own memory is the process's."""
    return component.removeprefix("drafter_").startswith("gpu_") and component != "gpu_driver"


def process_rss() -> dict[str, int]:
    """This process's resident memory now: total, file-backed (mapped) and anonymous."""
    info = psutil.Process().memory_info()
    shared = getattr(info, "shared", 0)
    return {"rss": int(info.rss), "mapped": int(shared), "anon": int(info.rss - shared)}


def peak_rss() -> int | None:
    """The process's peak resident memory (VmHWM) where the OS reports it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) if sys.platform == "darwin" else int(peak) * 1024
    except Exception:
        return None


def fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}" if unit == "GB" else f"{n / size:.0f} {unit}"
    return f"{int(n)} B"


def parse_bytes(text: str) -> int:
    """'900MB', '1.5GB', '1.2GiB', '800M', '1500000000' -> bytes."""
    t = text.strip().replace(" ", "").upper()
    units = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "KB": 1e3, "MB": 1e6, "GB": 1e9,
             "K": 1e3, "M": 1e6, "G": 1e9, "B": 1}
    for u in sorted(units, key=len, reverse=True):
        if t.endswith(u):
            num = t[: -len(u)]
            break
    else:
        u, num = "B", t
    try:
        value = float(num)
    except ValueError:
        raise ValueError(f"not a memory size: {text!r} (try 900MB or 1.5GB)") from None
    if value <= 0:
        raise ValueError(f"a memory budget must be positive, not {text!r}")
    return int(value * units[u])
