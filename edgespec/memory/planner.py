"""The planner: given a memory budget, the configuration to run (SpecMemo-style).

It searches context size, KV cache type, micro-batch, weight loading, drafter
and draft length over the memory model (footprint.py) and keeps the best that
fits: an unquantized KV cache first (a quantized one changes the model's own
output), then the context the user asked for (a conversation needs it), then the
drafter asked for before its fallbacks (that drafter VocabTrim'd, then model-free
drafting). The draft length is the largest that fits, because the controller
only shortens drafts that do not pay; the predicted speed-up is reported beside
the plan. `plan` is pure: no model is loaded, so it is tested without one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from edgespec.drafters import AUTO, PLAIN, REGISTRY, DrafterSpec
from edgespec.errors import EdgespecError
from edgespec.memory.footprint import GPU_DRIVER_FIXED, Footprint, ModelConfig, fmt_bytes, predict
from edgespec.models.facts import ModelFacts
from edgespec.runtimes.gpu.devices import GPU_RESERVE_BYTES, GPU_RESERVE_SHARE, gpu_layers
from edgespec.runtimes.gpu.profiles import ModelShape, RooflineCost
from edgespec.runtimes.kv_cache import KV_QUALITY

if TYPE_CHECKING:
    from edgespec.runtimes.gpu.profiles import DeviceProfile

MIN_CTX = 256
BATCHES = (512, 128, 64)
# Prior acceptance per drafted token, before anything is measured. Model-free drafts
# are accepted less often than a model's; both are the bench's order of magnitude on
# this project's prompts (docs/benchmarks.md); the engine learns the real rates.
PRIOR_ACCEPT = {"model": 0.7, "free": 0.6}
# A k-token verification costs about this much more than one token per extra token
# where nothing was measured (the bench's calibration curve replaces it).
DEFAULT_BATCH_SLOPE = 0.25
# VocabTrim sizes the planner may cut a same-vocabulary drafter model to, largest first, where
# the model as named does not fit a budget (export/gguf_trim.py builds the one chosen, once)
TRIM_KS = (32768, 16384, 8192)
# Plans fill at most this share of a budget: the memory model's error against
# measured peak RSS was within 4% on the models profiled (docs/memory.md).
HEADROOM = 0.95


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
        return _predict(self.target, self.config(prefill), self.drafter,
                        self.drafter_model if _uses_model(self.drafter) else None,
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


def named_drafters(drafter: str) -> list[str]:
    """The drafters a request names: one, or several ("a,b") for the planner to choose
    among by predicted throughput, e.g. a drafter and its VocabTrim'd exports."""
    return list(dict.fromkeys(d.strip() for d in drafter.split(",") if d.strip()))


def drafter_candidates(drafter: str, trims: Sequence[str] = ()) -> list[tuple[str, int]]:
    """The drafters a plan may choose, each with its tier: those named first (tier 0, ranked
    among themselves by predicted throughput), then what to fall back to when none fits: a
    named model trimmed (`trims`, in their order: the most tokens kept first, since trimming
    costs acceptance), the model-free hybrid where a model was named, then plain decoding."""
    named = named_drafters(drafter)
    out = [(d, 0) for d in named] + [(t, 1 + i) for i, t in enumerate(trims)]
    if any(_uses_model(d) for d in named) and AUTO not in named:
        out.append((AUTO, 1 + len(trims)))
    if PLAIN not in named:
        out.append((PLAIN, 2 + len(trims)))
    return out


def trimmed_facts(facts: ModelFacts, k: int) -> ModelFacts:
    """A drafter model's facts once trimmed to `k` tokens as gguf_trim does it: the rows of its
    token embedding and LM head cut to k, each row its bytes as before (sliced, not quantized
    again), every other tensor as it is; the full embedding beside it is mapped and read by the
    row, like the file pages of tokens never seen (outside this model, as for any trimmed export)."""
    share = k / facts.n_vocab
    embd, out = round(facts.embd_bytes * share), round(facts.output_bytes * share)
    cut = facts.embd_bytes - embd + facts.output_bytes - out
    return replace(facts, n_vocab=k, n_tokens=facts.n_tokens - (facts.n_vocab - k), embd_bytes=embd,
                   output_bytes=out, tensor_bytes=facts.tensor_bytes - cut, file_bytes=facts.file_bytes - cut,
                   vocab_coverage=None)


def trim_candidates(target: ModelFacts, drafters: Mapping[str, ModelFacts]) -> dict[str, ModelFacts]:
    """The trims a plan may fall back to (`NAME@trimK`): each named drafter model of the target's
    own vocabulary, cut to each of TRIM_KS below it. (A model trimmed already has fewer LM-head
    rows than the target's vocabulary, so it is not trimmed again.)"""
    return {DrafterSpec.parse(d).trimmed(k).name: trimmed_facts(f, k) for d, f in drafters.items()
            if f.n_vocab == target.n_vocab and f.embd_bytes for k in TRIM_KS if k < f.n_vocab}


def _uses_model(drafter: str) -> bool:
    return DrafterSpec.parse(drafter).uses_model


def predicted_speedup(drafter: str, k: int, target: ModelFacts, drafter_model: ModelFacts | None,
                      batch_costs: Sequence[float] | None = None, draft_cost: float | None = None,
                      accept: float | None = None) -> float:
    """Expected tokens per step over the step's cost, in plain-decoding steps.

    Acceptance per drafted token is `accept` where generations measured it for this pair,
    else a prior (PRIOR_ACCEPT), scaled by a VocabTrim'd drafter's coverage;
    a drafted token of a model costs `draft_cost` target tokens where its step was
    measured, else the bytes it reads per token as a share of the target's (decoding is
    memory-bound); batch_costs[n] is the cost of verifying n tokens relative to one
    (measured by calibration)."""
    if drafter == PLAIN or k <= 0:
        return 1.0
    model = _uses_model(drafter) and drafter_model is not None
    a = PRIOR_ACCEPT["model" if model else "free"]
    if model and accept is not None:
        a = min(accept, 0.99)  # the geometric series below needs a < 1
    elif model and drafter_model.vocab_coverage is not None:
        a *= drafter_model.vocab_coverage  # a trimmed LM head cannot propose the tokens it dropped (VocabTrim)
    if not model:
        c = 0.0
    elif draft_cost is not None:
        c = draft_cost
    else:
        c = _read_per_token(drafter_model) / max(1, _read_per_token(target))
    best = 1.0
    for j in range(1, k + 1):
        tokens = (1 - a ** (j + 1)) / (1 - a)
        if batch_costs is not None and len(batch_costs) > j + 1:
            verify = batch_costs[j + 1] / batch_costs[1]
        else:
            verify = 1 + DEFAULT_BATCH_SLOPE * j
        best = max(best, tokens / (verify + j * c))
    return best


def _read_per_token(facts: ModelFacts) -> int:
    """Weight bytes one decoded token reads: all of them, except an untied input embedding,
    of which it reads one row."""
    return facts.tensor_bytes - (facts.embd_bytes if facts.output_bytes else 0)


@dataclass(frozen=True)
class PlanRequest:
    """What a plan is asked for (see `plan`).

    `budget` in bytes, None: no limit (llama.cpp's defaults). `drafter` may name several
    drafters ("a,b"); `drafter_model` holds the model drafter's facts, or, with several, a
    mapping from each model drafter's name to its facts. `baseline` is the process's own
    memory before any model is loaded, measured by the caller: a budget covers the whole
    process. `batch_costs` (seconds per batch size, index 0 unused), `draft_costs` (a drafter's
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
    batch_costs: Sequence[float] | None = None
    repack: bool | None = None
    gpu: GpuMemory | None = None
    draft_costs: Mapping[str, float] | None = None
    cost_source: str = "measured on this machine"
    draft_accept: Mapping[str, float] | None = None
    trims: Mapping[str, ModelFacts] | None = None


def plan(req: PlanRequest) -> Plan:
    """The best configuration within the budget. With a GPU, it also chooses how many layers
    to offload (as many as fit, before a longer draft); a GPU sharing the system's RAM counts
    in the budget. Among several drafters it takes the one with the highest predicted
    throughput among those that fit (a VocabTrim'd drafter is cheaper and smaller, and
    accepted less often: its K is chosen so). Raises BudgetError, naming the minimum, when
    not even plain decoding fits."""
    planning = _Planning(req)
    return planning.unbudgeted() if req.budget is None else planning.within_budget(req.budget)


@dataclass(frozen=True)
class _Fit:
    """A configuration that fits the budget, for one drafter."""

    drafter: str
    ctx: int
    kv: str
    n_batch: int
    k: int  # draft tokens
    gpu_layers: int
    speedup: float
    kv_rank: int  # in KV_QUALITY: 0, the model's own output
    tier: int  # 0: a drafter named; higher, a fallback (drafter_candidates)

    def preference(self) -> tuple:
        """The order of `_search`: the model's own output, context, a drafter named over a fallback,
        the GPU's share, predicted throughput, draft length, prefill batch."""
        return (-self.kv_rank, self.ctx, -self.tier, self.gpu_layers, self.speedup, self.k, self.n_batch)

    def config(self) -> ModelConfig:
        return _config(self.ctx, self.kv, self.n_batch, self.drafter, self.k, self.gpu_layers)


class _Planning:
    """One plan's search: the request, the drafters it may choose and what each would give."""

    def __init__(self, req: PlanRequest) -> None:
        self.req = req
        self.named = named_drafters(req.drafter)
        if not self.named:
            raise ValueError("no drafter named")
        self.models = _drafter_models(self.named, req.drafter_model)
        self.n_named = len(self.models)
        self.trims = dict(req.trims or {}) if req.budget is not None else {}
        self.models.update(self.trims)
        target = req.target
        self.want_ctx = min(req.n_ctx, target.n_ctx_train) if target.n_ctx_train else req.n_ctx
        self.minimum = math.ceil(_minimum(target, req.baseline, PLAIN, req.repack, req.gpu) / HEADROOM)
        cheapest = min(REGISTRY, key=lambda m: REGISTRY[m].table_bytes(target.n_vocab, MIN_CTX))
        self.minimum_spec = math.ceil(_minimum(target, req.baseline, cheapest, req.repack, req.gpu) / HEADROOM)

    def speedup(self, d: str, k: int) -> float:
        r = self.req
        return predicted_speedup(d, k, r.target, self.models.get(d), r.batch_costs, (r.draft_costs or {}).get(d),
                                 (r.draft_accept or {}).get(d))

    def basis(self) -> str:
        """What a choice among drafters rests on."""
        r = self.req
        verify = f"verification costs {r.cost_source}" if r.batch_costs is not None else "a verification prior"

        def which(measured: list[str]) -> str:
            return f" for {', '.join(measured)}" if measured and len(measured) < self.n_named else ""

        steps = [d for d in self.models if d in (r.draft_costs or {})]
        accepted = [d for d in self.models if d in (r.draft_accept or {})]
        return (f"{verify}; drafter steps {'measured' if steps else 'from weight sizes'}{which(steps)}; "
                f"acceptance {'measured' if accepted else 'a prior'}{which(accepted)}")

    def unbudgeted(self) -> Plan:
        """llama.cpp's defaults at the context asked for, with the drafter predicted fastest."""
        r, k = self.req, self.req.max_draft
        d = max(self.named, key=lambda d: self.speedup(d, k))  # the first named on a tie
        ngl = gpu_layers(r.target, r.gpu.free, self.want_ctx) if r.gpu is not None else 0
        cfg = ModelConfig(n_ctx=self.want_ctx, max_outputs=k + 1 if d != PLAIN else 1, prefill=self.want_ctx,
                          gpu_layers=ngl)
        notes = [_choice_note(d, {x: f"{self.speedup(x, k):.2f}x" for x in self.named}, self.basis())] \
            if len(self.named) > 1 else []
        return self._plan(d, k if d != PLAIN else 0, cfg, budget=None, load="mmap", notes=notes)

    def within_budget(self, budget: int) -> Plan:
        """The best configuration that fits (the order of preference: `_search`)."""
        r = self.req
        if self.minimum > budget:
            raise BudgetError(
                f"a memory budget of {fmt_bytes(budget)} is too small for {_name(r.target)}: plain decoding needs "
                f"at least {fmt_bytes(self.minimum)} (a {MIN_CTX}-token context, {_kv_types(r.gpu)[-1]} KV cache, "
                f"this process's {fmt_bytes(r.baseline)} included)")
        best = self._search(math.floor(budget * HEADROOM))
        assert best, "the minimum fits, so the smallest context does"
        chosen = max(best.values(), key=_Fit.preference)
        return self._plan(chosen.drafter, chosen.k, chosen.config(), budget=budget, load="read",
                          notes=self._notes(best, chosen))

    def _contexts(self) -> list[int]:
        """The context asked for, then halved down to MIN_CTX."""
        ctxs, c = [], self.want_ctx
        while c >= MIN_CTX:
            ctxs.append(c)
            c //= 2
        if not ctxs or ctxs[-1] > MIN_CTX:
            ctxs.append(min(MIN_CTX, self.want_ctx))
        return ctxs

    def _search(self, limit: int) -> dict[str, _Fit]:
        """Per drafter, its most preferred configuration that fits `limit`: the model's own output
        first (a quantized KV cache changes it), then the context, then a drafter named over a
        fallback, then the GPU's share, then predicted throughput (which drafter named, how long a
        draft), then prefill batch (`_Fit.preference`)."""
        r, best = self.req, {}
        for ctx in self._contexts():
            for q, kv in enumerate(_kv_types(r.gpu)):
                for d, tier in drafter_candidates(r.drafter, list(self.trims)):
                    for ngl in _offload_candidates(r.target, r.gpu, ctx, kv):
                        for nb in BATCHES:
                            k = _largest_draft(r.target, limit, r.baseline, d, self.models.get(d), ctx, kv, nb,
                                               r.max_draft, r.repack, ngl, r.gpu)
                            if k is None:
                                continue
                            fit = _Fit(d, ctx, kv, nb, k, ngl, self.speedup(d, k), q, tier)
                            if d not in best or fit.preference() > best[d].preference():
                                best[d] = fit
        return best

    def _notes(self, best: dict[str, _Fit], chosen: _Fit) -> list[str]:
        """What the budget cost the plan, against what was asked for."""
        r = self.req
        d, ctx, kv, k, ngl = chosen.drafter, chosen.ctx, chosen.kv, chosen.k, chosen.gpu_layers
        notes = []
        if ctx < self.want_ctx:
            notes.append(f"context {ctx} instead of {self.want_ctx}: a larger one does not fit")
        if kv != "f16":
            notes.append(f"KV cache quantized to {kv} (flash attention on) to fit")
        if d not in self.named:
            why = "none of them fits" if len(self.named) > 1 else f"{r.drafter} does not fit"
            notes.append(f"drafter {d} instead of {r.drafter}: {why}")
        else:
            if len(self.named) > 1:
                each = {x: _described(best[x], ctx, kv) if x in best else None for x in self.named}
                notes.append(_choice_note(d, each, self.basis()))
            if d != PLAIN and k < r.max_draft:
                notes.append(f"at most {k} draft tokens instead of {r.max_draft}: their logits would not fit")
            if _uses_model(d) and self.speedup(d, k) <= 1.0:
                notes.append(f"no draft of {d} is predicted to pay here: the controller will draft little")
        if r.gpu is not None and ngl <= r.target.n_layer:
            notes.append(f"{ngl} of {r.target.n_layer + 1} layers on {r.gpu.name}: more do not fit")
        return notes

    def _plan(self, d: str, k: int, cfg: ModelConfig, budget: int | None, load: str, notes: list[str]) -> Plan:
        r, dm = self.req, self.models.get(d)
        return Plan(budget=budget, n_ctx=cfg.n_ctx, kv_type=cfg.kv_type, n_batch=cfg.n_batch, load=load, drafter=d,
                    max_draft=k, footprint=_predict(r.target, cfg, d, dm, r.baseline, r.repack, r.gpu),
                    speedup=self.speedup(d, k), minimum=self.minimum, minimum_speculative=self.minimum_spec,
                    notes=notes, target=r.target, drafter_model=dm,
                    n_gpu_layers=cfg.gpu_layers if r.gpu is not None else 0,
                    n_outputs_max=cfg.n_outputs_max if budget is not None else 0, gpu=r.gpu)


def _drafter_models(named: Sequence[str], drafter_model) -> dict[str, ModelFacts]:
    """Each named model drafter's facts, from one ModelFacts (one model drafter) or a mapping."""
    wanted = [d for d in named if _uses_model(d)]
    if isinstance(drafter_model, Mapping):
        models = {d: drafter_model[d] for d in wanted if d in drafter_model}
    elif drafter_model is not None and len(wanted) == 1:
        models = {wanted[0]: drafter_model}
    else:
        models = {}
    missing = [d for d in wanted if d not in models]
    if missing:
        raise ValueError(f"drafter {missing[0]!r} needs its model's facts")
    return models


def _described(fit: _Fit, ctx: int, kv: str) -> str:
    """A drafter's best configuration as a choice note shows it: its predicted speed-up, and
    what it would give up (context, KV cache type) where it fits only so."""
    return (f"{fit.speedup:.2f}x" + (f" at context {fit.ctx}" if fit.ctx != ctx else "")
            + (f" with a {fit.kv} KV cache" if fit.kv != kv else ""))


def _choice_note(chosen: str, each: Mapping[str, str | None], basis: str) -> str:
    """Why a drafter was taken among several: the model's own output and context come first
    (see `plan`), then each one's predicted speed-up where it fits."""
    listed = ", ".join(f"{d} {s}" if s is not None else f"{d} does not fit" for d, s in each.items())
    return f"drafter {chosen} chosen among {listed} (predicted: {basis})"


def _config(ctx: int, kv: str, nb: int, d: str, k: int, ngl: int = 0) -> ModelConfig:
    """A budgeted configuration: weights read once, attention scores bounded by a full context,
    logits reserved for the longest verification only."""
    outputs = k + 1 if d != PLAIN else 1
    return ModelConfig(n_ctx=ctx, kv_type=kv, n_batch=nb, load="read", flash_attn=kv != "f16",
                       max_outputs=outputs, prefill=ctx, n_outputs_max=outputs, gpu_layers=ngl)


def _offload_candidates(target: ModelFacts, gpu: GpuMemory | None, ctx: int, kv: str) -> list[int]:
    """Layer counts worth trying, most first: all that the GPU's memory holds, then fewer."""
    if gpu is None:
        return [0]
    most = gpu_layers(target, gpu.free, ctx, kv)
    return sorted({most, min(most, target.n_layer), most * 3 // 4, most // 2, most // 4, 0}, reverse=True)


def _fits(fp: Footprint, limit: int, gpu: GpuMemory | None) -> bool:
    if fp.total > limit:
        return False
    return gpu is None or fp.gpu_bytes <= gpu.allowance


def _largest_draft(target: ModelFacts, limit: int, baseline: int, d: str, dm: ModelFacts | None, ctx: int,
                   kv: str, nb: int, max_draft: int, repack: bool | None, ngl: int = 0,
                   gpu: GpuMemory | None = None) -> int | None:
    """The largest draft length (0 for plain decoding) that fits `limit`, or None."""
    for k in ([0] if d == PLAIN else range(max_draft, 0, -1)):  # two logits rows per draft token: a short scan
        fp = _predict(target, _config(ctx, kv, nb, d, k, ngl), d, dm, baseline, repack, gpu)
        if _fits(fp, limit, gpu):
            return k
    return None


def _minimum(target: ModelFacts, baseline: int, d: str, repack: bool | None, gpu: GpuMemory | None = None) -> int:
    """The smallest footprint of drafter `d` (none: plain decoding) before headroom."""
    cfg = _config(MIN_CTX, _kv_types(gpu)[-1], BATCHES[-1], d, 1)
    return _predict(target, cfg, d, None, baseline, repack, gpu).total


def _kv_types(gpu: GpuMemory | None) -> tuple[str, ...]:
    """KV cache types a plan may choose: on a GPU, f16 only, since a quantized cache turns on
    flash attention, whose pipelines the driver's measured memory does not include."""
    return ("f16",) if gpu is not None else KV_QUALITY


def _predict(target: ModelFacts, cfg: ModelConfig, d: str, dm: ModelFacts | None, baseline: int,
             repack: bool | None, gpu: GpuMemory | None) -> Footprint:
    return predict(target, cfg, d, dm, baseline=baseline, repack=repack, gpu_shares_ram=gpu is None or gpu.shares_ram,
                   gpu_driver=gpu.driver if gpu is not None else None)


def _name(m: ModelFacts) -> str:
    return Path(m.path).stem



def plan_for_profile(target: ModelFacts, profile: "DeviceProfile", budget: int | None = None, drafter: str = AUTO,
                     drafter_model: ModelFacts | None = None, n_ctx: int = 4096, max_draft: int = 16,
                     baseline: int = 0) -> Plan:
    """The plan for a device that is not here (a DeviceProfile of runtimes/gpu/profiles.py):
    layers offloaded to its GPU as its memory allows (shared RAM where the profile says so),
    the budget by default the memory an app gets there, and the speed-up predicted from its
    roofline's verification costs rather than this machine's. Its driver's memory cannot be
    measured here: an assumed fixed amount counts instead (lavapipe's line would charge a
    CPU's compiled shaders to a GPU), and the plan says so."""
    cost = RooflineCost(profile, ModelShape.from_facts(target))
    n_past = min(n_ctx, target.n_ctx_train or n_ctx) // 2  # a conversation half-way through its context
    batch_costs = [0.0] + [cost.eval_cost(n, n_past).seconds for n in range(1, max_draft + 2)]
    gpu = GpuMemory(profile.memory_bytes, profile.shared_memory, profile.description, driver=GPU_DRIVER_FIXED)
    try:
        p = plan(PlanRequest(target, profile.memory_bytes if budget is None else budget, drafter, drafter_model,
                             n_ctx=n_ctx, max_draft=max_draft, baseline=baseline, batch_costs=batch_costs, gpu=gpu,
                             cost_source=f"from {profile.name}'s roofline"))
    except BudgetError as e:
        raise BudgetError(f"{profile.name}: {e}") from None
    p.notes.insert(0, f"PROJECTED for {profile.name}: its GPU driver's memory assumed to be {fmt_bytes(GPU_DRIVER_FIXED)}, "
                      f"not measured; this process's {fmt_bytes(baseline)} counted as if on the device")
    return p


def plain_footprint(target: ModelFacts, n_ctx: int, baseline: int = 0, repack: bool | None = None) -> int:
    """The least plain decoding needs at this context without changing the model's
    output (f16 KV cache; weights read once; a small micro-batch): the reference a
    budget such as "plain + 10%" is measured from."""
    ctx = min(n_ctx, target.n_ctx_train) if target.n_ctx_train else n_ctx
    cfg = ModelConfig(n_ctx=ctx, kv_type="f16", n_batch=BATCHES[-1], load="read", max_outputs=1, prefill=ctx)
    return predict(target, cfg, PLAIN, baseline=baseline, repack=repack).total

