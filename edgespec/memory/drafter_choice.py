"""The drafters a plan may take, and the speed-up each is predicted to give.

A request names one drafter or several; where none fits, a plan falls back to a named model
VocabTrim'd, then to model-free drafting, then to plain decoding. Each is ranked by its
predicted throughput: acceptance and drafting cost from measurements where generations made
them, else from priors and weight sizes (decoding is memory-bound).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from edgespec.drafters import AUTO, PLAIN, DrafterSpec
from edgespec.models.facts import ModelFacts

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
    model = uses_model(drafter) and drafter_model is not None
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
