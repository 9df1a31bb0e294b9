"""A plan: the configuration a model runs in within a memory budget, what it is predicted to
take and to give, and what it was asked for (`PlanRequest`). The search is planner.py's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from edgespec.drafters import AUTO, PLAIN
from edgespec.memory.drafter_choice import uses_model
from edgespec.errors import EdgespecError
from edgespec.memory.footprint import Footprint, ModelConfig, fmt_bytes, predict
from edgespec.models.facts import ModelFacts
from edgespec.runtimes.gpu.devices import GPU_RESERVE_BYTES, GPU_RESERVE_SHARE


class BudgetError(EdgespecError):
    """A memory budget too small for what was asked."""


@dataclass(frozen=True)
class GpuMemory:
    """The GPU a plan offloads to: its free memory, and whether that memory is the
    system's RAM (integrated and software GPUs), which the budget then covers too."""

    free: int
    shares_ram: bool
    name: str = "GPU"
    driver: int | None = None  # the driver's own memory, measured (driver_memory.py); None: estimated

    @property
    def allowance(self) -> int:
        return int(self.free * (1 - GPU_RESERVE_SHARE) - GPU_RESERVE_BYTES)


@dataclass
class Plan:
    budget: int | None
    n_ctx: int
    kv_type: str
    n_batch: int
    load: str
    drafter: str
    max_draft: int
    footprint: Footprint
    speedup: float  # predicted over plain decoding with the same configuration
    minimum: int  # the least plain decoding needs
    minimum_speculative: int  # the least needed to speculate at all
    notes: list[str] = field(default_factory=list)
    target: ModelFacts | None = None
    drafter_model: ModelFacts | None = None
    n_gpu_layers: int = 0  # of n_layer + 1 offloaded; 0: the CPU alone
    n_outputs_max: int = 0  # logits rows reserved per micro-batch (0: llama.cpp's default, n_batch)
    gpu: "GpuMemory | None" = None

    def config(self, prefill: int | None = None) -> ModelConfig:
        """The target's configuration; `prefill` narrows the attention-score bound
        from a full context to a known workload's longest prompt."""
        return ModelConfig(n_ctx=self.n_ctx, kv_type=self.kv_type, n_batch=self.n_batch, load=self.load,
                           flash_attn=self.flash_attn, max_outputs=self.max_draft + 1 if self.drafter != PLAIN else 1,
                           prefill=self.n_ctx if prefill is None else prefill, n_outputs_max=self.n_outputs_max,
                           gpu_layers=self.n_gpu_layers)

    def predict(self, prefill: int | None = None, baseline: int | None = None) -> Footprint:
        """The footprint of this plan for a workload whose prompts reach `prefill` tokens."""
        assert self.target is not None
        return footprint_of(self.target, self.config(prefill), self.drafter,
                            self.drafter_model if uses_model(self.drafter) else None,
                            self.footprint.baseline if baseline is None else baseline, None, self.gpu)

    @property
    def flash_attn(self) -> bool:
        return self.kv_type != "f16"

    def backend_options(self) -> dict:
        """Keyword arguments for LlamaCppBackend (target and drafter model alike)."""
        opts = {"kv_type": self.kv_type, "n_batch": self.n_batch, "load": self.load,
                "n_outputs_max": self.n_outputs_max}
        if self.gpu is None:
            return opts
        # all layers as -1, so a drafter model with more layers than the target gets all of its own
        full = self.target is not None and self.n_gpu_layers > self.target.n_layer
        return {**opts, "n_gpu_layers": -1 if full else self.n_gpu_layers}

    def to_dict(self) -> dict:
        return {
            "budget": self.budget, "n_ctx": self.n_ctx, "kv_type": self.kv_type, "n_batch": self.n_batch,
            "load": self.load, "flash_attn": self.flash_attn, "drafter": self.drafter, "max_draft": self.max_draft,
            "predicted": self.footprint.to_dict(), "predicted_speedup": round(self.speedup, 3),
            "minimum": self.minimum, "minimum_speculative": self.minimum_speculative, "notes": self.notes,
            "n_gpu_layers": self.n_gpu_layers, "n_outputs_max": self.n_outputs_max,
        }

    def summary(self) -> str:
        b = f"budget {fmt_bytes(self.budget)}" if self.budget else "no budget"
        gpu = f", {self.n_gpu_layers} layers on the GPU" if self.gpu is not None else ""
        return (f"{b}: context {self.n_ctx}, KV {self.kv_type}, batch {self.n_batch}, weights {self.load}{gpu}, "
                f"drafter {self.drafter}" + (f", up to {self.max_draft} draft tokens" if self.max_draft else "")
                + "; predicted "
                f"{fmt_bytes(self.footprint.total)}")


@dataclass(frozen=True)
class PlanRequest:
    """What a plan is asked for (see `planner.plan`).

    `budget` in bytes, None: no limit (llama.cpp's defaults). `drafter` may name several
    drafters ("a,b"); `drafter_model` holds the model drafter's facts, or, with several, a
    mapping from each model drafter's name to its facts. `baseline` is the process's own
    memory before any model is loaded, measured by the caller: a budget covers the whole
    process. `batch_costs` (seconds by the batch sizes timed), `draft_costs` (a drafter's
    step in target tokens) and `draft_accept` (a model drafter's greedy acceptance against
    this target) replace the priors of `predicted_speedup` where measured; `cost_source` says
    where the costs came from. `gpu`: the GPU to offload to. `trims`: VocabTrim'd versions of
    the model drafters the plan may take, by name.
    """

    target: ModelFacts
    budget: int | None
    drafter: str = AUTO
    drafter_model: ModelFacts | Mapping[str, ModelFacts] | None = None
    n_ctx: int = 4096
    max_draft: int = 16
    baseline: int = 0
    batch_costs: Mapping[int, float] | None = None
    repack: bool | None = None
    gpu: GpuMemory | None = None
    draft_costs: Mapping[str, float] | None = None
    cost_source: str = "measured on this machine"
    draft_accept: Mapping[str, float] | None = None
    trims: Mapping[str, ModelFacts] | None = None


def footprint_of(target: ModelFacts, cfg: ModelConfig, d: str, dm: ModelFacts | None, baseline: int,
                 repack: bool | None, gpu: GpuMemory | None) -> Footprint:
    """The memory model's footprint of a configuration, its GPU (if any) sharing the system's
    RAM or not, the GPU driver's memory as measured there."""
    return predict(target, cfg, d, dm, baseline=baseline, repack=repack, gpu_shares_ram=gpu is None or gpu.shares_ram,
                   gpu_driver=gpu.driver if gpu is not None else None)
