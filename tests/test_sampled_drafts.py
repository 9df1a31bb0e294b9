"""Sampling with model drafters: a drafter draws its tokens from its own
distribution and hands that distribution to the verifier, and what the engine
emits is still distributed exactly as plain sampling from the target."""

from collections import Counter

import numpy as np
import pytest

from helpers import always_draft
from edgespec.drafters import CrossVocabDrafter, ModelDrafter
from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
from edgespec.speculative.engine import Engine
from edgespec.speculative.verifier import SamplingParams, target_probs
from merged_vocab import MergedVocabBackend

PARAMS = dict(temperature=1.0, top_k=3)
CHI2_DF26_999 = 54.05  # chi-square critical value, 26 degrees of freedom, significance 0.001
RUNS = 3000


class Perturbed(ReferenceBackend):
    """The target's model with every logit shifted by a fixed pattern: a drafter
    that agrees with the target often, not always."""

    def eval(self, ids, n_logits=None):
        out = super().eval(ids, n_logits)
        return out + 1.2 * np.sin(np.arange(out.shape[1]) * 1.7)


def exact_joint(model: ReferenceModel, prompt: list[int], params: SamplingParams) -> dict[tuple, float]:
    """P(first three tokens) under plain sampling, computed from the target's logits."""
    b = ReferenceBackend(model)

    def dist(prefix):
        b.rollback(0)
        return target_probs(b.eval(prefix, n_logits=1)[0], params)

    joint = {}
    p1 = dist(prompt)
    for x1 in np.flatnonzero(p1):
        p2 = dist(prompt + [int(x1)])
        for x2 in np.flatnonzero(p2):
            p3 = dist(prompt + [int(x1), int(x2)])
            for x3 in np.flatnonzero(p3):
                joint[(int(x1), int(x2), int(x3))] = p1[x1] * p2[x2] * p3[x3]
    return joint


def sampled_joint(engine: Engine, prompt: list[int]) -> tuple[Counter, int, int]:
    """Counts of the first three tokens over many seeds; drafted and accepted tokens."""
    counts: Counter = Counter()
    drafted = accepted = 0
    for seed in range(RUNS):
        engine.reset()
        # four tokens, so that after the first (sampled from the prompt) two are drafted
        counts[tuple(list(engine.generate(prompt, 4, SamplingParams(**PARAMS, seed=seed)))[:3])] += 1
        drafted += engine.last_stats.drafted
        accepted += engine.last_stats.accepted
    return counts, drafted, accepted


def chi_square(counts: Counter, joint: dict[tuple, float]) -> float:
    """Pearson's statistic. A verifier told the wrong q (flattened over the drafter's
    top 3) scores 600-740 here, against 11-15 with the right one."""
    assert set(counts) <= set(joint), "emitted a sequence plain sampling never would"
    n = sum(counts.values())
    return sum((counts.get(s, 0) - p * n) ** 2 / (p * n) for s, p in joint.items())


@pytest.fixture(scope="module")
def model():
    return ReferenceModel(seed=3)


def _check(model, drafter):
    target = ReferenceBackend(model)
    prompt = target.tokenizer.encode("The cat sat on")
    engine = Engine(target, drafter, controller=always_draft(max_k=2), calibrate=False)
    counts, drafted, accepted = sampled_joint(engine, prompt)
    joint = exact_joint(model, prompt, SamplingParams(**PARAMS))
    assert len(joint) == 27  # top-3 at each of three positions: a 27-cell test
    assert chi_square(counts, joint) < CHI2_DF26_999
    assert 0 < accepted < drafted  # drafts were both accepted and rejected
    return drafted, accepted


@pytest.mark.slow
def test_a_same_vocabulary_drafter_samples_its_drafts_and_the_output_keeps_the_targets_distribution(model):
    drafted, accepted = _check(model, ModelDrafter(Perturbed(model), p_min=0.0))
    assert drafted >= 2 * RUNS  # two tokens drafted in every run's first step
    assert accepted > RUNS


@pytest.mark.slow
def test_a_cross_vocabulary_drafter_samples_its_drafts_and_the_output_keeps_the_targets_distribution(model):
    merged = MergedVocabBackend(model)
    merged.tokenizer.add_bos = True  # it reads the target's context, BOS first, so the two often agree
    drafted, accepted = _check(model, CrossVocabDrafter(merged, ReferenceBackend(model).tokenizer, p_min=0.0,
                                                         sample_drafts=True))
    # a drawn merged token ("th") has no one-token twin among the target's bytes: it ends the draft
    assert drafted < 2 * RUNS and accepted > RUNS


class TrimmedPerturbed(Perturbed):
    """That drafter with its LM head cut to the tokens `keep` (VocabTrim): logits row i is
    token keep[i], and a token it dropped can never be drafted."""

    def __init__(self, model: ReferenceModel, keep: np.ndarray) -> None:
        super().__init__(model)
        self.vocab_map, self.inputs_trimmed = keep, False

    def eval(self, ids, n_logits=None):
        return super().eval(ids, n_logits)[:, self.vocab_map]


@pytest.mark.slow
def test_a_vocab_trimmed_drafter_samples_its_drafts_and_the_output_keeps_the_targets_distribution(model):
    target = ReferenceBackend(model)
    prompt = target.tokenizer.encode("The cat sat on")
    # drop one of the tokens plain sampling may emit at each of the three positions
    joint = exact_joint(model, prompt, SamplingParams(**PARAMS))
    dropped = {s[0] for s in joint} | {s[1] for s in joint} | {s[2] for s in joint}
    dropped = set(sorted(dropped)[::3])
    keep = np.array([t for t in range(target.n_vocab) if t not in dropped])
    drafter = ModelDrafter(TrimmedPerturbed(model, keep), p_min=0.0)
    drafted, accepted = _check(model, drafter)
    assert accepted > RUNS // 2
