"""The verifier: greedy keeps the target's argmax path; rejection sampling keeps
the target's distribution whatever the draft."""

import numpy as np
import pytest

from edgespec.speculative.verifier import SamplingParams, sample, target_probs, verify_greedy, verify_sampling

# chi-square critical value for 5 degrees of freedom at significance 0.001
CHI2_DF5_999 = 20.515


def onehot_rows(tokens, vocab=6):
    out = np.zeros((len(tokens), vocab), dtype=np.float32)
    for i, t in enumerate(tokens):
        out[i, t] = 5.0
    return out


def test_greedy_accepts_matching_prefix_then_takes_the_targets_token():
    logits = onehot_rows([3, 1, 4, 2])  # the target wants 3, 1, 4 and then 2
    assert verify_greedy([3, 1, 4], logits) == (v := verify_greedy([3, 1, 4], logits))
    assert (v.n_accepted, v.next_token) == (3, 2)  # all accepted plus the bonus token
    v = verify_greedy([3, 5, 4], logits)
    assert (v.n_accepted, v.next_token) == (1, 1)  # stops at the first mismatch, corrects it
    v = verify_greedy([], logits[:1])
    assert (v.n_accepted, v.next_token) == (0, 3)  # no draft: plain decoding


def test_target_probs_applies_temperature_top_k_and_top_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = target_probs(logits, SamplingParams(temperature=1.0))
    np.testing.assert_allclose(p, [0.5, 0.3, 0.15, 0.05])
    p = target_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    np.testing.assert_allclose(p, [0.625, 0.375, 0, 0])
    p = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.8))
    np.testing.assert_allclose(p, [0.625, 0.375, 0, 0])  # 0.5 + 0.3 reaches 0.8
    sharp = target_probs(logits, SamplingParams(temperature=0.1))
    assert sharp[0] > 0.99


def chi_square(counts, probs):
    n = counts.sum()
    expected = probs * n
    mask = expected > 0
    assert counts[~mask].sum() == 0, "drew a token the target gives probability 0"
    return float((((counts - expected) ** 2)[mask] / expected[mask]).sum())


def emitted_tokens(draft, draft_probs, logits, params, n, seed=1):
    """First and second emitted tokens over n speculative steps."""
    rng = np.random.default_rng(seed)
    first = np.zeros(logits.shape[1], dtype=np.int64)
    second = np.zeros(logits.shape[1], dtype=np.int64)
    for _ in range(n):
        v = verify_sampling(draft, draft_probs, logits, params, rng)
        toks = list(draft[: v.n_accepted]) + [v.next_token]
        first[toks[0]] += 1
        if len(toks) > 1:
            second[toks[1]] += 1
    return first, second


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_k=4),
                                    SamplingParams(temperature=1.3, top_p=0.9)])
def test_rejection_sampling_with_a_deterministic_draft_keeps_the_target_distribution(params):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 6)) * 1.5  # positions are independent of the prefix here
    p = target_probs(logits, params)
    first, second = emitted_tokens([2, 4], None, logits, params, 20000)
    assert chi_square(first, p[0]) < CHI2_DF5_999
    # the second token is emitted only when the first draft token was accepted
    # (then it is drawn from position 1's distribution)
    assert chi_square(second, p[1]) < CHI2_DF5_999


def test_rejection_sampling_with_a_sampled_draft_keeps_the_target_distribution():
    rng = np.random.default_rng(1)
    params = SamplingParams(temperature=1.0)
    logits = rng.normal(size=(2, 6))
    p = target_probs(logits, params)
    q = rng.dirichlet(np.ones(6), size=1)
    counts = np.zeros(6, dtype=np.int64)
    draw_rng = np.random.default_rng(2)
    for _ in range(20000):
        x = int(draw_rng.choice(6, p=q[0]))  # the drafter samples its token from q
        v = verify_sampling([x], q, logits, params, draw_rng)
        counts[x if v.n_accepted else v.next_token] += 1
    assert chi_square(counts, p[0]) < CHI2_DF5_999


def test_the_chi_square_check_detects_a_biased_sampler():
    """The statistical test has teeth: always accepting a draft changes the distribution."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 6))
    p = target_probs(logits, SamplingParams(temperature=1.0))
    biased = np.bincount(np.where(rng.random(20000) < 0.5, 2, rng.choice(6, 20000, p=p[0])), minlength=6)
    assert chi_square(biased, p[0]) > CHI2_DF5_999


def test_plain_sampling_is_seeded_and_greedy_is_argmax():
    logits = np.array([0.1, 2.0, 0.3])
    assert sample(logits, SamplingParams(), np.random.default_rng(0)) == 1
    a = [sample(logits, SamplingParams(temperature=1.0), np.random.default_rng(5)) for _ in range(3)]
    b = [sample(logits, SamplingParams(temperature=1.0), np.random.default_rng(5)) for _ in range(3)]
    assert a == b
