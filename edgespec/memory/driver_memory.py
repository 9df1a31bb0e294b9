"""What a GPU driver holds in the process once models have run on it: measured, not modelled.

A driver compiles a pipeline for each kernel, weight type and batch width the first time
it runs, and keeps it (lavapipe: LLVM-compiled code, docs/design.md "The memory model").
Nothing in a model file predicts that, so before a memory budget is planned for a GPU, a child process loads the models
with every layer offloaded, runs one full micro-batch and every verification width the
plan may use, and reports its peak RSS (VmHWM, which also catches compile-time
transients), with Mesa's shader cache off so that the figure holds for a cold cache.
What the memory model does not account for in that run is the driver's.
The child also times the batch sizes for the engine's calibration cache, which the main
process would otherwise measure again. Results are cached per GPU, build, models and widths.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import platformdirs

from edgespec.drafters.registry import PLAIN
from edgespec.errors import EdgespecError
from edgespec.memory.footprint import ModelConfig, peak_rss, predict, process_rss
from edgespec.models.facts import ModelFacts
from edgespec.speculative.engine import Engine

MEASURE_CTX = 1024  # enough for one full micro-batch and the widest verification; small, so quick
VERSION = 4  # bump when what the child runs changes


def measured(facts: Sequence[ModelFacts], device: str, gpu_name: str, n_batch: int, widths: int,
             run: bool = True) -> int | None:
    """Bytes the GPU driver adds for these models (the target first, then a drafter model),
    from the cache or, with `run`, measured now in a child process (seconds on a hardware
    GPU, minutes on a software one). None when not cached and not run."""
    paths = [f.path for f in facts]
    key = _key(paths, device, gpu_name, n_batch, widths)
    cache = Path(platformdirs.user_cache_dir("edgespec")) / "gpu-driver" / f"{_digest(key)}.json"
    try:
        data = json.loads(cache.read_text())
        if data.get("key") == key:
            return int(data["driver"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if not run:
        return None
    # Mesa's shader cache off: compiling a shader costs more memory than loading it from the
    # cache (lavapipe: SmolLM2's child peaked 144 MB higher, Qwen2.5-Coder-0.5B's 195 MB), and a
    # budgeted run may find the cache cold (a new driver, an emptied cache), so plan for that
    env = {**os.environ, "MESA_SHADER_CACHE_DISABLE": "true"}
    r = subprocess.run([sys.executable, "-m", "edgespec.memory.driver_memory", device, str(n_batch), str(widths),
                        *map(str, paths)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise EdgespecError(f"measuring the GPU driver's memory failed ({last})")
    child = json.loads(r.stdout.strip().splitlines()[-1])
    driver = max(0, child["peak"] - child["base"] - accounted(facts, n_batch, widths))
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"key": key, "driver": driver, **child}))
    except OSError:
        pass  # measured again next time
    return driver


def accounted(facts: Sequence[ModelFacts], n_batch: int, widths: int) -> int:
    """What the memory model predicts for the child's run, the driver aside."""
    target, drafter = facts[0], (facts[1] if len(facts) > 1 else None)
    cfg = ModelConfig(n_ctx=MEASURE_CTX, n_batch=n_batch, load="read", max_outputs=widths, prefill=n_batch,
                      n_outputs_max=widths, gpu_layers=target.n_layer + 1)
    dcfg = replace(cfg, max_outputs=1, gpu_layers=drafter.n_layer + 1) if drafter is not None else None
    return predict(target, cfg, PLAIN, drafter, dcfg, gpu_driver=0).total


def _key(paths: Sequence[str | Path], device: str, gpu_name: str, n_batch: int, widths: int) -> str:
    import llama_cpp as ll

    files = []
    for p in paths:
        st = Path(p).stat()
        files.append(f"{Path(p).resolve()}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(map(str, [VERSION, device, gpu_name, ll.__version__, n_batch, widths, *files]))


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _child(device: str, n_batch: int, widths: int, paths: Sequence[str]) -> dict:
    from edgespec.runtimes.llamacpp import LlamaCppBackend, init_backend

    init_backend(device)  # the driver's start-up is in the planning process's baseline too
    base = process_rss()["rss"]
    backends = [LlamaCppBackend(p, n_ctx=MEASURE_CTX, device=device, n_gpu_layers=-1, load="read", n_batch=n_batch,
                                n_outputs_max=widths) for p in paths]
    if not backends[0].placement.gpus:
        raise EdgespecError(f"no GPU for --device {device}: {backends[0].notice}")
    for i, b in enumerate(backends):
        filler = b.tokenizer.bos_id or 0
        b.eval([filler] * n_batch, n_logits=1)  # a full micro-batch: the prompt's kernels
        b.rollback(0)
        if i == 0 and widths > 1:  # the target verifies every width: warm and time them (the engine's cache);
            # timed even when cached: the main process may time them too
            Engine(b, None, max_draft=widths - 1).calibrate(sizes=range(1, widths + 1))
        else:  # plain decoding's one token; a drafter model catches up by several at once, one logits row
            for w in range(1, widths + 1):
                b.eval([filler] * w, n_logits=1)
                b.rollback(0)
    return {"base": base, "peak": peak_rss() or process_rss()["rss"], "device": backends[0].device}


if __name__ == "__main__":
    try:
        print(json.dumps(_child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])))
    except Exception as e:  # one line for the parent's error message
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
