"""The memory model: bytes a llama.cpp configuration will hold, predicted from
the GGUF file's own facts, before anything is loaded.

What was measured to build it (llama.cpp 0.3.36, CPU; psutil RSS split into
anonymous and file-backed pages, see `edgespec profile`):

- Weights. With mmap (llama.cpp's default) the whole file becomes resident as
  file pages, and tensors llama.cpp repacks for its x86 GEMM kernels (Q4_0, Q4_K,
  IQ4_NL matmul weights with rows in multiples of 8) are copied into anonymous
  memory besides: Qwen2.5-Coder-1.5B Q4_K_M holds 1.12 GB mapped plus 0.63 GB
  repacked. Read into memory instead (load mode "read"), weights cost their
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
- Drafter tables: the model-free drafters' own bounds (see drafters/).
- Runtime: code and modules paged in when the first model loads, once per process.

Everything here is pure arithmetic over `ModelFacts`; the planner searches it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

KV_TYPES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}  # bytes per element, blocks included
KV_QUALITY = ("f16", "q8_0", "q4_0")  # best first; quantized V needs flash attention in llama.cpp
CTX_PAD = 256
VOCAB_ENTRY_BYTES = 165  # llama.cpp's vocabulary: measured 46.6 MiB for Qwen2.5 (152k tokens + 151k merges)
REPACKED = ("Q4_0", "Q4_K", "IQ4_NL")
RECYCLE_BYTES = 4_000_000  # TokenRecyclingDrafter's default bound
NGRAM_BYTES_PER_TOKEN = 600  # lookup and n-gram indexes: a few dict entries per history token
FACTS_VERSION = 3  # bump when ModelFacts gains a field: cached facts of older versions are read again
RUNTIME_BYTES = 12_000_000  # paged in on first use: llama.cpp's code, the modules loading imports (measured 10-13 MB)
# What a GPU driver adds in the process as kernels first run, beyond llama.cpp's buffers:
# compiled shader pipelines, one per weight type and batch width (ggml-vulkan's matrix-vector
# kernels take 1 to 8 columns). A rough estimate for predictions without a budget (a line
# through two lavapipe measurements with every layer offloaded); budgets are planned from
# the driver's memory measured on the machine (driver_memory.py). Its start-up (lavapipe:
# 56 MB) is in the baseline.
GPU_DRIVER_FIXED = 68_000_000
GPU_DRIVER_PER_WEIGHT_BYTE = 0.9


@dataclass(frozen=True)
class ModelFacts:
    """What the memory model needs from one GGUF file, read without loading it."""

    path: str
    architecture: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_embd: int
    n_ff: int
    head_k: int
    head_v: int
    n_vocab: int  # rows of the LM head (K for a VocabTrim'd drafter)
    n_tokens: int  # vocabulary entries (tokens + merges) llama.cpp keeps
    tensor_bytes: int
    file_bytes: int
    repack_bytes: int  # tensors llama.cpp repacks on x86 with AVX2
    n_ctx_train: int
    embd_bytes: int = 0  # the input embedding: llama.cpp keeps it on the host, whatever it offloads
    output_bytes: int = 0  # the LM head; 0 when tied to the embedding (a GPU then holds a second copy)
    # a VocabTrim'd drafter: the share of the target's tokens its K rows keep, as its export
    # counted them (manifest.json's trim.coverage); None for a full vocabulary
    vocab_coverage: float | None = None

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "ModelFacts":
        """The facts of a GGUF file, cached per file (path, size, mtime).

        Parsing a 150k-token vocabulary with the gguf package leaves about 55 MB
        of Python objects behind in the process's RSS (freed memory the allocator
        keeps), which is exactly what a memory budget cannot afford; so a miss is
        read in a child process and only the small result comes back."""
        import hashlib
        import json
        import subprocess
        import sys

        from .errors import ModelError
        from .store import cache_dir

        p = Path(path).resolve()
        st = p.stat()
        key = {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "facts": FACTS_VERSION}
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]
        cache = cache_dir() / "facts" / f"{digest}.json"
        try:
            data = json.loads(cache.read_text())
            if data.pop("key") == key:
                return cls(**data)
        except (OSError, ValueError, KeyError, TypeError):
            pass
        r = subprocess.run([sys.executable, "-m", "edgespec.footprint", str(p)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ModelError((r.stderr.strip().splitlines() or [f"cannot read {p}"])[-1])
        data = json.loads(r.stdout)
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps({**data, "key": key}))
        except OSError:
            pass  # read again next time
        return cls(**data)

    @classmethod
    def read(cls, path: str | os.PathLike) -> "ModelFacts":
        """Parse the file in this process (see from_gguf for why that is avoided)."""
        from .gguf_check import read_checked_gguf

        r = read_checked_gguf(path)
        f = r.fields

        def get(key: str, default=None):
            v = f.get(key)
            if v is None:
                return default
            c = v.contents()
            return max(c) if isinstance(c, list) else c

        arch = str(get("general.architecture"))
        n_embd = int(get(f"{arch}.embedding_length"))
        n_head = int(get(f"{arch}.attention.head_count"))
        n_head_kv = int(get(f"{arch}.attention.head_count_kv", n_head))
        n_layer = int(get(f"{arch}.block_count"))
        head_k = int(get(f"{arch}.attention.key_length", n_embd // n_head))
        head_v = int(get(f"{arch}.attention.value_length", head_k))
        n_tok = len(f["tokenizer.ggml.tokens"].data)
        merges = f.get("tokenizer.ggml.merges")
        rows = {t.name: int(t.shape[1]) for t in r.tensors
                if t.name in ("output.weight", "token_embd.weight") and len(t.shape) == 2}
        out_rows = rows.get("output.weight", rows.get("token_embd.weight", n_tok))  # tied heads reuse the embedding
        sizes = {t.name: int(t.n_bytes) for t in r.tensors}
        repack = 0
        for t in r.tensors:
            shape = [int(s) for s in t.shape]
            if (t.tensor_type.name in REPACKED and len(shape) == 2 and shape[1] % 8 == 0
                    and t.name != "token_embd.weight"):
                repack += int(t.n_bytes)
        return cls(
            path=str(path), architecture=arch, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv,
            n_embd=n_embd, n_ff=int(get(f"{arch}.feed_forward_length", 4 * n_embd)), head_k=head_k,
            head_v=head_v, n_vocab=out_rows, n_tokens=n_tok + (len(merges.data) if merges is not None else 0),
            tensor_bytes=sum(int(t.n_bytes) for t in r.tensors), file_bytes=Path(path).stat().st_size,
            repack_bytes=repack, n_ctx_train=int(get(f"{arch}.context_length", 0) or 0),
            embd_bytes=sizes.get("token_embd.weight", 0), output_bytes=sizes.get("output.weight", 0),
            vocab_coverage=_trim_coverage(Path(path)),
        )


def _trim_coverage(path: Path) -> float | None:
    """trim.coverage from the manifest an `edgespec export --trim-vocab` wrote beside the file."""
    from .errors import ModelError
    from .export_check import read_manifest

    try:
        trim = (read_manifest(path.parent) or {}).get("trim")
        return float(trim["coverage"]) if isinstance(trim, dict) and trim.get("coverage") is not None else None
    except (ModelError, TypeError, ValueError):  # an unreadable manifest is the export checks' business
        return None


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

        from .runtimes.llamacpp import _init_backend

        _init_backend()  # the system info starts llama.cpp's devices: set up the process's first
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


def drafter_table_bytes(kind: str, n_vocab: int, n_ctx: int) -> int:
    """Model-free drafters' tables at their bounds (a full context of history)."""
    kinds = {"lookup": ("lookup",), "ngram": ("ngram",), "recycle": ("recycle",),
             "auto": ("lookup", "ngram", "recycle")}.get(kind.split("+")[0], ())
    total = 0
    for k in kinds:
        total += min(RECYCLE_BYTES, 32 * n_vocab) if k == "recycle" else NGRAM_BYTES_PER_TOKEN * n_ctx
    return total


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


def predict(target: ModelFacts, cfg: ModelConfig, drafter: str = "none", drafter_model: ModelFacts | None = None,
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
    tables = drafter_table_bytes(drafter, target.n_vocab, cfg.n_ctx)
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
    import psutil

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
        import sys

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


if __name__ == "__main__":  # python -m edgespec.footprint FILE: the facts as JSON (see ModelFacts.from_gguf)
    import dataclasses
    import json
    import sys

    from .errors import EdgespecError

    try:
        print(json.dumps(dataclasses.asdict(ModelFacts.read(sys.argv[1]))))
    except EdgespecError as e:
        sys.exit(str(e))
