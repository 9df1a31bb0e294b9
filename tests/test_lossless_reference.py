"""Losslessness, exactly: on a backend whose arithmetic does not depend on batch
shape, greedy speculation with every drafter equals plain greedy decoding token
for token."""

import pytest

from helpers import always_draft
from edgespec.drafters import make_drafter
from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
from edgespec.speculative.engine import Engine
from prompts import PROMPTS

MAX_TOKENS = 48


@pytest.fixture(scope="module")
def model():
    return ReferenceModel(seed=7)


@pytest.fixture(scope="module")
def plain_outputs(model):
    backend = ReferenceBackend(model)
    engine = Engine(backend)
    outs = []
    for p in PROMPTS:
        engine.reset()
        outs.append(list(engine.generate(backend.tokenizer.encode(p), MAX_TOKENS)))
    return outs


def test_there_are_at_least_twenty_varied_prompts():
    assert len(PROMPTS) >= 20


@pytest.mark.parametrize("drafter", ["lookup", "ngram", "recycle", "auto"])
def test_greedy_speculation_equals_plain_greedy_token_for_token(model, plain_outputs, drafter):
    backend = ReferenceBackend(model)
    controller = always_draft(max_k=8)  # verify every proposal in full: the hardest case
    engine = Engine(backend, make_drafter(drafter, backend.n_vocab, controller), controller=controller,
                    calibrate=False)
    drafted = accepted = 0
    for prompt, expected in zip(PROMPTS, plain_outputs):
        out = list(engine.generate(backend.tokenizer.encode(prompt), MAX_TOKENS))
        assert out == expected, f"{drafter} diverged on {prompt[:30]!r}"
        drafted += engine.last_stats.drafted
        accepted += engine.last_stats.accepted
    # the test means something only if drafts were both accepted and rejected
    assert accepted > 0 and drafted > accepted


def test_a_perfect_drafter_saves_target_passes(model, plain_outputs):
    """Speculation pays through fewer target evaluations: with an oracle drafter
    the same output takes a fraction of the passes."""
    from edgespec.speculative.drafter import Draft, Drafter, Kind

    class Oracle(Drafter):
        def __init__(self, future):
            self.future = future

        def propose(self, history, k):
            return Draft(self.future[self.start(history):][:k], Kind("oracle"))

        def begin(self, history, sampling=None):
            self.n_prompt = len(history)

        def start(self, history):
            return len(history) - self.n_prompt

    prompt = PROMPTS[0]
    expected = plain_outputs[0]
    backend = ReferenceBackend(model)
    controller = always_draft(8)
    engine = Engine(backend, Oracle(expected), controller=controller, calibrate=False)
    out = list(engine.generate(backend.tokenizer.encode(prompt), MAX_TOKENS))
    assert out == expected
    assert engine.last_stats.steps <= len(expected) // 8 + 2
    assert engine.last_stats.acceptance_rate == 1.0


def test_chat_turns_reuse_the_kv_cache_and_stay_lossless(model):
    backend = ReferenceBackend(model)
    tok = backend.tokenizer
    engine = Engine(backend, make_drafter("auto", backend.n_vocab, always_draft()), controller=always_draft(),
                    calibrate=False)
    first = tok.encode(PROMPTS[10])
    out1 = list(engine.generate(first, 24))
    second = first + out1 + tok.encode("<|user|>\nAnd Spain?</s>\n<|assistant|>\n", add_bos=False)
    work_before = backend.tokens_evaluated
    out2 = list(engine.generate(second, 24))
    st = engine.last_stats
    prefill_work = backend.tokens_evaluated - work_before - st.steps - st.drafted
    # only the new turn was prefilled: the earlier turn's KV cache was reused
    assert prefill_work <= len(second) - len(first)
    assert engine.last_stats.prompt_tokens == len(second)
    # a plain engine on a fresh cache produces the same second answer
    fresh = Engine(ReferenceBackend(model))
    assert list(fresh.generate(second, 24)) == out2
