"""The planner on this machine's files: a plan for a model file and drafter names, from the
models' facts, what earlier runs measured here (batch costs, drafter steps, acceptance), this
process's memory and the GPU llama.cpp would use; a VocabTrim'd drafter the plan chose is built
and planned again on its file. The search itself is `planner.plan`, which reads nothing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Mapping

from edgespec.drafters import AUTO, PLAIN, DrafterSpec, check_drafter
from edgespec.errors import ModelError
from edgespec.export.gguf_trim import cached_trim
from edgespec.memory.driver_memory import measured
from edgespec.memory.footprint import parse_bytes, process_rss
from edgespec.memory.drafter_choice import named_drafters, trim_candidates
from edgespec.memory.plan import BudgetError, GpuMemory, Plan, PlanRequest
from edgespec.memory.planner import BATCHES, plan
from edgespec.models.facts import ModelFacts
from edgespec.models.store import model_file
from edgespec.runtimes.gpu.devices import place, shares_ram
from edgespec.speculative import calibration


def make_plan(model_path, drafter: str = AUTO, n_ctx: int = 4096, max_draft: int = 16,
              budget: int | str | None = None, device: str = "cpu", trim: bool = True) -> Plan | None:
    """The plan for a model file and drafter name, this process's memory now as the
    baseline. None without a budget for models the memory model does not cover
    (ONNX exports); with a budget they are refused. With `device` gpu or auto, the
    GPU llama.cpp would use is planned for (see `plan`); a budget then first measures the
    driver's memory for these models, once per machine (driver_memory.py).

    On the CPU, where a drafter model of the target's vocabulary does not fit the budget
    but would once VocabTrim'd, the plan trims it (`trim`; the most tokens that fit, built
    once into the cache by export/gguf_trim.py) and drafts with the trimmed model."""
    if isinstance(budget, str):
        try:
            budget = parse_bytes(budget)
        except ValueError as e:
            raise BudgetError(str(e)) from None
    named = named_drafters(drafter)
    found = {d: check_drafter(d) for d in named}  # an unknown name is refused before any file is read
    files = {d: model_file(p) for d, p in found.items() if p is not None}  # the model drafters'
    target_file = model_file(model_path)
    onnx = [p for p in [target_file, *files.values()] if p.suffix.lower() != ".gguf"]
    if onnx:
        if budget is None and len(named) == 1:
            return None
        raise BudgetError(f"memory budgets and a choice among drafters are planned for GGUF models (llama.cpp); "
                          f"{onnx[0]} is not one")
    req = PlanRequest(ModelFacts.from_gguf(target_file), budget, drafter,
                      {d: ModelFacts.from_gguf(p) for d, p in files.items()}, n_ctx=n_ctx, max_draft=max_draft,
                      baseline=process_rss()["rss"])
    gpu = gpu_memory(device)
    if gpu is not None:
        req = replace(req, gpu=_with_driver(req, gpu, device))
    else:
        batch_costs, draft_costs = measured_costs(target_file, files)
        trims = trim_candidates(req.target, req.drafter_model) if trim and budget is not None else {}
        req = replace(req, batch_costs=batch_costs, draft_costs=draft_costs, trims=trims)
    p = plan(replace(req, draft_accept=measured_acceptance(target_file, files)))
    if p.drafter not in (req.trims or {}):
        return p
    return _with_trim(p, model_path, files, req, device)


def _with_driver(req: PlanRequest, gpu: GpuMemory, device: str) -> GpuMemory:
    """The GPU with its driver's memory for these models: measured once per machine where a
    budget needs it (a budget that cannot fit even without the driver is refused first), else
    what an earlier measurement found (None: estimated)."""
    models = req.drafter_model
    if len(models) > 1:
        raise BudgetError("a GPU plan takes one model drafter (its driver's memory is measured for that pair): "
                          f"name one of {', '.join(models)}")
    facts = [req.target, *models.values()]
    widths = req.max_draft + 1 if req.drafter != PLAIN else 1  # the verification widths the plan may run
    driver = measured(facts, device, gpu.name, BATCHES[0], widths, run=False)
    if driver is None and req.budget is not None:
        try:
            plan(replace(req, gpu=replace(gpu, driver=0)))
        except BudgetError as e:
            raise BudgetError(f"{e}, before the GPU driver's own memory") from None
        driver = measured(facts, device, gpu.name, BATCHES[0], widths)
    return replace(gpu, driver=driver)


def _with_trim(p: Plan, model_path, files: Mapping[str, Path], req: PlanRequest, device: str) -> Plan:
    """A plan that chose a VocabTrim'd drafter, made again on the trimmed file (built once into
    the cache), or without it, saying why, where it cannot be built."""
    spec = DrafterSpec.parse(p.drafter)
    name, k = spec.model, spec.trim
    try:
        built = cached_trim(files[spec.untrimmed], k)
    except (ModelError, OSError) as e:  # a plan without the trim still runs: say why it is missing
        q = make_plan(model_path, req.drafter, req.n_ctx, req.max_draft, req.budget, device, trim=False)
        assert q is not None
        q.notes.insert(0, f"{name} could not be trimmed to fit ({e})")
        return q
    # planned again on the file itself: its own facts, and its measured costs once it has drafted
    q = make_plan(model_path, spec.with_model(str(built)).name, req.n_ctx, req.max_draft, req.budget, device, trim=False)
    assert q is not None
    q.notes.insert(0, f"{name} trimmed to its {k} most used tokens (VocabTrim, in {built.parent}): with its full "
                      f"vocabulary it does not fit at context {p.n_ctx}")
    return q


def measured_acceptance(target: Path, drafters: Mapping[str, Path]) -> dict[str, float]:
    """Each model drafter's greedy acceptance per drafted token against this target, where
    earlier generations kept it (calibration.save_acceptance; any device: the models decide it)."""
    found = {d: calibration.acceptance(target, p) for d, p in drafters.items()}
    return {d: c[1] / c[0] for d, c in found.items() if c}


def measured_costs(target: Path, drafters: Mapping[str, Path]) -> tuple[dict[int, float] | None, dict[str, float]]:
    """What earlier runs on this machine's CPU measured: the target's seconds per batch size
    (the sizes its calibration timed; the planner prices the others) and each model drafter's
    step in target tokens (as generation measured it). (None, {}) before the target was
    calibrated."""
    seconds = calibration.latest(calibration.model_prefix(target))
    if not seconds or 1 not in seconds:
        return None, {}
    steps = {d: calibration.latest(calibration.DRAFTER_STEP + calibration.model_prefix(p)) for d, p in drafters.items()}
    return seconds, {d: s[1] / seconds[1] for d, s in steps.items() if s and 1 in s}


def gpu_memory(device: str) -> GpuMemory | None:
    """The GPU a `--device` request gets from llama.cpp, or None for the CPU."""
    if device == "cpu":
        return None

    gpus = place(device).gpus
    if not gpus:
        return None
    return GpuMemory(gpus[0].free, shares_ram(gpus[0]), f"{gpus[0].name} ({gpus[0].description})")
