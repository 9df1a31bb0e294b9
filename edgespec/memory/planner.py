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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from edgespec.drafters import AUTO, PLAIN, REGISTRY
from edgespec.memory.drafter_choice import (drafter_candidates, named_drafters, predicted_speedup, uses_model,
                                           verification_units)
from edgespec.memory.footprint import GPU_DRIVER_FIXED, ModelConfig, Footprint, fmt_bytes, predict
from edgespec.memory.plan import BudgetError, GpuMemory, Plan, PlanRequest, footprint_of
from edgespec.models.facts import ModelFacts
from edgespec.runtimes.gpu.devices import gpu_layers
from edgespec.runtimes.gpu.profiles import ModelShape, RooflineCost
from edgespec.runtimes.kv_cache import KV_QUALITY

if TYPE_CHECKING:
    from edgespec.runtimes.gpu.profiles import DeviceProfile

MIN_CTX = 256
BATCHES = (512, 128, 64)
# Plans fill at most this share of a budget: the memory model's error against
# measured peak RSS was within 4% on the models profiled (docs/memory.md).
HEADROOM = 0.95


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
        self.verify = verification_units(req.batch_costs, req.max_draft)

    def speedup(self, d: str, k: int) -> float:
        r = self.req
        return predicted_speedup(d, k, r.target, self.models.get(d), self.verify, (r.draft_costs or {}).get(d),
                                 (r.draft_accept or {}).get(d))

    def basis(self) -> str:
        """What a choice among drafters rests on."""
        r = self.req
        verify = f"verification costs {r.cost_source}" if r.batch_costs is not None \
            else "verification costs not timed yet (priced as decoding tries them)"

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
            if uses_model(d) and self.speedup(d, k) <= 1.0:
                notes.append(f"no draft of {d} is predicted to pay here: the controller will draft little")
        if r.gpu is not None and ngl <= r.target.n_layer:
            notes.append(f"{ngl} of {r.target.n_layer + 1} layers on {r.gpu.name}: more do not fit")
        return notes

    def _plan(self, d: str, k: int, cfg: ModelConfig, budget: int | None, load: str, notes: list[str]) -> Plan:
        r, dm = self.req, self.models.get(d)
        return Plan(budget=budget, n_ctx=cfg.n_ctx, kv_type=cfg.kv_type, n_batch=cfg.n_batch, load=load, drafter=d,
                    max_draft=k, footprint=footprint_of(r.target, cfg, d, dm, r.baseline, r.repack, r.gpu),
                    speedup=self.speedup(d, k), minimum=self.minimum, minimum_speculative=self.minimum_spec,
                    notes=notes, target=r.target, drafter_model=dm,
                    n_gpu_layers=cfg.gpu_layers if r.gpu is not None else 0,
                    n_outputs_max=cfg.n_outputs_max if budget is not None else 0, gpu=r.gpu)


def _drafter_models(named: Sequence[str], drafter_model) -> dict[str, ModelFacts]:
    """Each named model drafter's facts, from one ModelFacts (one model drafter) or a mapping."""
    wanted = [d for d in named if uses_model(d)]
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
        fp = footprint_of(target, _config(ctx, kv, nb, d, k, ngl), d, dm, baseline, repack, gpu)
        if _fits(fp, limit, gpu):
            return k
    return None


def _minimum(target: ModelFacts, baseline: int, d: str, repack: bool | None, gpu: GpuMemory | None = None) -> int:
    """The smallest footprint of drafter `d` (none: plain decoding) before headroom."""
    cfg = _config(MIN_CTX, _kv_types(gpu)[-1], BATCHES[-1], d, 1)
    return footprint_of(target, cfg, d, None, baseline, repack, gpu).total


def _kv_types(gpu: GpuMemory | None) -> tuple[str, ...]:
    """KV cache types a plan may choose: on a GPU, f16 only, since a quantized cache turns on
    flash attention, whose pipelines the driver's measured memory does not include."""
    return ("f16",) if gpu is not None else KV_QUALITY


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
    batch_costs = {n: cost.eval_cost(n, n_past).seconds for n in range(1, max_draft + 2)}
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

