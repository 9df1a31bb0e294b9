"""The drafters a plan may take, and the speed-up each is predicted to give.

A request names one drafter or several; where none fits, a plan falls back to a named model
VocabTrim'd, then to model-free drafting, then to plain decoding. Each is ranked by its
predicted throughput, priced as the controller prices a draft (the acceptance model's tokens per
step over the cost curve's batches): acceptance and drafting cost from measurements where
generations made them, else from priors and weight sizes (decoding is memory-bound).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from edgespec.drafters import AUTO, PLAIN, DrafterSpec
from edgespec.models.facts import ModelFacts
from edgespec.speculative.acceptance import tokens_per_step
from edgespec.speculative.cost_curve import CostModel

# Prior acceptance per drafted token, before anything is measured. Model-free drafts
# are accepted less often than a model's; both are the bench's order of magnitude on
# this project's prompts (docs/benchmarks.md). The controller starts lower
# (AcceptanceModel.prior), so that a kind costs little while it is learned; a plan ranks
# drafters at their typical rate.
PRIOR_ACCEPT = {"model": 0.7, "free": 0.6}
# VocabTrim sizes the planner may cut a same-vocabulary drafter model to, largest first, where
# the model as named does not fit a budget (export/gguf_trim.py builds the one chosen, once)
TRIM_KS = (32768, 16384, 8192)


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
    if any(uses_model(d) for d in named) and AUTO not in named:
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


def uses_model(drafter: str) -> bool:
    return DrafterSpec.parse(drafter).uses_model


def verification_units(batch_costs: Mapping[int, float] | None, max_draft: int) -> list[float]:
    """What verifying n tokens costs in units of one, n = 0..max_draft + 1: each size measured
    (`batch_costs`, seconds by batch size) as it is, the rest at the price the controller
    tries a size it has not measured yet at (`CostModel.optimistic_costs`)."""
    cost = CostModel(max_n=max_draft + 1)
    if batch_costs is not None:
        cost.set_timed({n: s for n, s in batch_costs.items() if 1 <= n <= max_draft + 1})
    units = cost.optimistic_costs()
    return (units / units[1]).tolist()


def predicted_speedup(drafter: str, k: int, target: ModelFacts, drafter_model: ModelFacts | None,
                      verify: Sequence[float] | None = None, draft_cost: float | None = None,
                      accept: float | None = None) -> float:
    """Expected tokens per step over the step's cost, in plain-decoding steps, at the best
    draft length up to k.

    Acceptance per drafted token is `accept` where generations measured it for this pair,
    else a prior (PRIOR_ACCEPT), scaled by a VocabTrim'd drafter's coverage;
    a drafted token of a model costs `draft_cost` target tokens where its step was
    measured, else the bytes it reads per token as a share of the target's (decoding is
    memory-bound); verify[n] is the cost of verifying n tokens relative to one
    (`verification_units`; None: nothing measured)."""
    if drafter == PLAIN or k <= 0:
        return 1.0
    model = uses_model(drafter) and drafter_model is not None
    a = PRIOR_ACCEPT["model" if model else "free"]
    if model and accept is not None:
        a = accept
    elif model and drafter_model.vocab_coverage is not None:
        a *= drafter_model.vocab_coverage  # a trimmed LM head cannot propose the tokens it dropped (VocabTrim)
    if not model:
        c = 0.0
    elif draft_cost is not None:
        c = draft_cost
    else:
        c = _read_per_token(drafter_model) / max(1, _read_per_token(target))
    verify = verification_units(None, k) if verify is None else verify
    tokens = tokens_per_step([a] * k)
    return max([1.0, *(tokens[j] / (verify[j + 1] + j * c) for j in range(1, k + 1))])


def _read_per_token(facts: ModelFacts) -> int:
    """Weight bytes one decoded token reads: all of them, except an untied input embedding,
    of which it reads one row."""
    return facts.tensor_bytes - (facts.embd_bytes if facts.output_bytes else 0)
