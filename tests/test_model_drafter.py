"""A model drafter keeps its own KV cache in step with the accepted history. After
a pause (the controller only probes a drafter that does not pay) it reads only the
history's head and its last `window` tokens instead of everything said since, and a
history longer than its context is drafted from the same cut."""

import pytest

from helpers import always_draft
from edgespec.drafters import ModelDrafter
from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
from edgespec.speculative.engine import Engine
from prompts import PROMPTS


class Counting(ReferenceBackend):
    """Counts the tokens the drafter evaluates: what its catch-up costs."""

    evaluated = 0

    def eval(self, ids, n_logits=None):
        self.evaluated += len(ids)
        return super().eval(ids, n_logits)


@pytest.fixture(scope="module")
def model():
    return ReferenceModel(seed=7)


def test_an_idle_drafter_reads_its_window_not_everything_since_it_last_drafted(model):
    tok = ReferenceBackend(model).tokenizer
    prompt = tok.encode(PROMPTS[0])
    later = prompt + tok.encode(" and then the story went on for a good while longer" * 2, add_bos=False)
    backend = Counting(model)
    drafter = ModelDrafter(backend, window=16, sink=4, p_min=0.0)
    drafter.begin(prompt)  # the prompt is read whole, as prompt processing
    assert backend.evaluated == len(prompt) - 1

    backend.evaluated = 0
    draft = drafter.propose(later, 3)  # 100 tokens later: a fresh cache of the head and the last 16
    assert backend.evaluated == 16 + 2  # the window (the head is still cached), then two drafting steps
    assert drafter.restarts == 1

    # the draft is what the model says after exactly that cut history
    fresh = ModelDrafter(ReferenceBackend(model), window=None, p_min=0.0)
    assert draft.tokens == fresh.propose(later[:4] + later[-16:], 3).tokens

    backend.evaluated = 0
    drafter.propose(later + draft.tokens[:2], 3)  # drafting again right away: only the new tokens
    assert backend.evaluated == 1 + 2 and drafter.restarts == 1


def test_a_probe_is_priced_at_a_window_read_from_the_start(model):
    """Before its first catch-up, what one costs is estimated from how fast the
    drafter read the prompt; after it, the measured time is used."""
    tok = ReferenceBackend(model).tokenizer
    prompt = tok.encode(PROMPTS[0] * 3)
    drafter = ModelDrafter(ReferenceBackend(model), window=16, p_min=0.0)
    assert drafter.cost.probe_seconds == 0.0  # nothing read yet: no estimate
    drafter.begin(prompt)
    estimate = drafter.cost.probe_seconds
    assert estimate > 0.0
    drafter.propose(prompt + tok.encode(" one more sentence, long enough to be a pause", add_bos=False), 2)
    assert drafter.cost.probe_seconds not in (0.0, estimate) and drafter.restarts == 1


def test_a_drafter_without_a_window_reads_the_whole_gap(model):
    tok = ReferenceBackend(model).tokenizer
    prompt = tok.encode(PROMPTS[0])
    later = prompt + tok.encode(" and then the story went on for a good while longer" * 2, add_bos=False)
    backend = Counting(model)
    drafter = ModelDrafter(backend, window=None, p_min=0.0)
    drafter.begin(prompt)
    backend.evaluated = 0
    drafter.propose(later, 3)
    assert backend.evaluated == len(later) - len(prompt) + 1 + 2


def test_speculation_stays_lossless_when_the_drafter_keeps_cutting_its_history(model):
    """A drafter whose context holds 48 tokens drafts for a target that holds 1024."""
    target = ReferenceBackend(model)
    tok = target.tokenizer
    plain = Engine(ReferenceBackend(model))
    drafter = ModelDrafter(ReferenceBackend(model, n_ctx=48), window=24, p_min=0.0)
    engine = Engine(target, drafter, controller=always_draft(max_k=4), calibrate=False)
    for p in PROMPTS[:8]:
        ids = tok.encode(p * 2)  # longer than the drafter's context
        plain.reset()
        engine.reset()
        assert list(engine.generate(ids, 40)) == list(plain.generate(ids, 40)), p[:30]
    assert drafter.restarts > 8  # cut at every prompt and again while generating
    assert engine.last_stats.accepted > 0
