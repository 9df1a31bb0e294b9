"""The speculation loop on a fake target and fake drafters: the KV-cache invariant and the
drafter's step contract, with nothing learned on disk, no load read and no model."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest

from edgespec.drafters import make_drafter
from edgespec.speculative import engine as engine_module, threads as threads_module
from edgespec.speculative.controller import DraftController
from edgespec.speculative.drafter import EMPTY, Draft, Drafter, Kind, ModelCost
from edgespec.speculative.engine import Engine
from edgespec.speculative.verifier import SamplingParams
from helpers import ScriptedBackend, always_draft, register_the_docs_drafter

TEXT = "one two one two one two three, one two one two three."


class NoOtherPrograms:
    """Other programs' load as the engine reads it (cpu_load.py): none, and nothing read."""

    def cores(self) -> float:
        return 0.0

    def seconds(self) -> float:
        return 0.0

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def machine_left_out(monkeypatch):
    """The loop alone: the load beside it is the thread policy's business, not read here."""
    for module in (engine_module, threads_module):
        monkeypatch.setattr(module, "OtherLoad", NoOtherPrograms)
    monkeypatch.setattr(threads_module, "RecentLoad", NoOtherPrograms)


class CheckedBackend(ScriptedBackend):
    """A scripted target that remembers what its cache holds; with `engine` set, it checks each
    verification batch against the engine's account of the cache and the last token emitted."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.held: list[int] = []
        self.engine: Engine | None = None
        self.emitted: list[int] = []
        self.batches: list[list[int]] = []

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        if self.engine is not None and self.batches:  # after the prompt: a verification batch
            assert self.held == self.engine.cached, "the cache holds what the engine says it does"
            assert ids[0] == self.emitted[-1], "a batch starts with the pending token"
        self.batches.append(list(ids))
        self.held.extend(ids)
        return super().eval(ids, n_logits)

    def rollback(self, n_past: int) -> None:
        self._check_rollback(n_past)
        del self.held[n_past:]
        super().rollback(n_past)


class Recording(Drafter):
    """Proposes the script's next tokens with every third one wrong, and records each call."""

    name = "recording"

    def __init__(self, script: list[int], prompt_len: int) -> None:
        self.script, self.prompt_len, self.calls = script, prompt_len, []

    def begin(self, history, sampling=None):
        self.calls.append(("begin", list(history), sampling))

    def propose(self, history, k):
        self.calls.append(("propose", list(history), k))
        start = len(history) - self.prompt_len
        tokens = [t if (start + i) % 3 else 0 for i, t in enumerate(self.script[start:start + k])]
        return Draft(tokens, Kind(self.name)) if tokens else EMPTY

    def observe(self, history, inputs, logits, next_token=None):
        self.calls.append(("observe", list(history), list(inputs), next_token))


def test_the_cache_holds_exactly_the_accepted_text_and_each_batch_starts_with_the_pending_token():
    backend = CheckedBackend(TEXT)
    prompt = list(b"count: ")
    engine = Engine(backend, Recording(backend.script, len(prompt)), controller=always_draft(4), calibrate=False)
    backend.engine = engine
    out = backend.emitted
    for t in engine.generate(prompt, 40):
        out.append(t)
    assert bytes(out) == TEXT.encode()[:40]
    assert backend.held == engine.cached == prompt + out[:-1]  # the last token is pending, not evaluated
    assert engine.last_stats.drafted > engine.last_stats.accepted > 0  # rejections were rolled back


def test_a_drafter_begins_once_proposes_after_the_text_so_far_and_observes_what_was_accepted():
    backend = CheckedBackend(TEXT)
    prompt = list(b"count: ")
    drafter = Recording(backend.script, len(prompt))
    engine = Engine(backend, drafter, controller=always_draft(4), calibrate=False)
    out = list(engine.generate(prompt, 24))
    begins = [c for c in drafter.calls if c[0] == "begin"]
    assert begins == [("begin", prompt, None)]  # greedy: no draws
    history = [*prompt, out[0]]  # the prompt's own logits give the first token
    for call in drafter.calls[1:]:
        if call[0] == "propose":
            _, seen, k = call
            assert seen == history and 1 <= k <= 4  # the text so far, the pending token last
        else:
            _, seen, inputs, next_token = call
            assert seen == history and inputs[0] == history[-1]  # the step's last token, then the accepted
            history = [*history, *inputs[1:], next_token]
    assert history[len(prompt):][: len(out)] == out


def test_a_sampled_generation_hands_the_drafter_its_parameters_and_generator():
    backend = CheckedBackend(TEXT)
    drafter = Recording(backend.script, 3)
    engine = Engine(backend, drafter, controller=always_draft(4), calibrate=False)
    list(engine.generate(list(b"go:"), 8, SamplingParams(temperature=0.7, seed=1)))
    _, _, sampling = drafter.calls[0]
    params, rng = sampling
    assert params.temperature == 0.7 and isinstance(rng, np.random.Generator)


def test_the_engine_asks_the_controller_how_long_a_model_drafters_draft_may_be_before_asking_it():
    """A model drafter pays for every token: its length is planned from its cost first, and
    one that never pays is asked only for the controller's rare probes."""
    backend = CheckedBackend("a" * 200)

    class Dear(Drafter):
        def __init__(self) -> None:
            self.cost = ModelCost(Kind("dear"), backend)
            self.cost.steps, self.cost.step_s = 1, 5.0  # five target steps per drafted token
            self.asked: list[int] = []

        def propose(self, history, k):
            self.asked.append(k)
            return Draft([ord("b")] * k, self.cost.kind)  # always wrong

    controller = DraftController(max_k=4)
    controller.cost.set_timed({1: 1.0, 2: 1.1, 5: 1.3})
    controller.cost.alpha = 0.0  # keep these prices whatever the real timings are
    drafter = Dear()
    out = list(Engine(backend, drafter, controller=controller, calibrate=False).generate(list(b"go"), 150))
    assert out == [ord("a")] * 150
    assert len(drafter.asked) <= 150 // controller.explore_every + 1 and set(drafter.asked) <= {1}


def test_the_drafter_in_the_docs_is_one_file_and_a_registry_line_and_stays_lossless(monkeypatch):
    name = register_the_docs_drafter(monkeypatch)
    backend = CheckedBackend("= = = = = = = = = = = = = = = = done")
    plain = list(Engine(backend).generate(list(b"rule: "), 36))
    backend = CheckedBackend("= = = = = = = = = = = = = = = = done")
    controller = always_draft(8)
    engine = Engine(backend, make_drafter(name, backend.n_vocab, controller), controller=controller,
                    calibrate=False)
    assert list(engine.generate(list(b"rule: "), 36)) == plain
    assert engine.last_stats.accepted > 10  # the period drafted most of the rule
