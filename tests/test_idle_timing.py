"""Between answers the engine times the batch sizes its cost curve lacks, and gives the
backend back the moment an answer wants it."""

from __future__ import annotations

import gc
import threading
import time
from typing import Sequence

import numpy as np
import pytest
from helpers import ScriptedBackend, always_draft

from edgespec.drafters import make_drafter
from edgespec.speculative import calibration, idle
from edgespec.speculative.controller import DraftController
from edgespec.speculative.engine import Engine


class ClockedBackend(ScriptedBackend):
    """A scripted model whose batches take time: `base` seconds plus `row` per token."""

    def __init__(self, text: str, base: float = 0.002, row: float = 0.001) -> None:
        super().__init__(text)
        self.base, self.row = base, row
        self.batches: list[int] = []  # sizes evaluated, in order

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        self.batches.append(len(ids))
        time.sleep(self.base + self.row * len(ids))
        return super().eval(ids, n_logits)

    def cost_key(self) -> str:
        return "clocked-backend-for-tests"


@pytest.fixture(autouse=True)
def quick_idle(monkeypatch, tmp_path):
    """Idle after a twentieth of a second, bursts of a fifth, and a calibration store of the test's own."""
    monkeypatch.setattr(idle, "SETTLE_S", 0.05)
    monkeypatch.setattr(idle, "BURST_S", 0.2)
    monkeypatch.setattr(idle, "MIN_SECONDS", 0.0)
    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")


def engine_on(backend, max_k: int = 8) -> Engine:
    controller = DraftController(max_k=max_k)
    return Engine(backend, make_drafter("lookup", backend.n_vocab, controller), controller=controller, idle_timing=True)


def wait_for(condition, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def test_a_new_engine_times_nothing_before_its_first_answer():
    b = ClockedBackend("hello world")
    engine = engine_on(b)
    time.sleep(0.3)
    assert b.batches == []
    engine.close()


def test_after_an_answer_the_idle_engine_learns_every_size_and_keeps_the_curve():
    b = ClockedBackend("hello world, hello world")
    engine = engine_on(b)
    list(engine.generate(list(b"say hello"), 8))
    cost = engine.controller.cost
    assert not cost.complete  # decoding alone measured only the sizes it ran
    assert wait_for(lambda: cost.complete)
    engine.close()
    assert engine.backend.n_past == len(engine.cached)  # every timed batch was undone
    # each size at about what the clock charges: 2 ms + 1 ms a token
    assert all(abs(cost.predict(n) - (0.002 + 0.001 * n)) < 0.004 for n in range(1, 10))
    kept = DraftController(max_k=8).cost
    assert calibration.load(b.cost_key(), kept) and kept.complete


def test_an_answer_that_arrives_while_the_engine_times_at_idle_starts_within_half_a_second():
    # a 9-token batch takes 0.3 s here: the answer may wait for one, never for the rest
    b = ClockedBackend("hello world, hello world", base=0.03, row=0.03)
    engine = engine_on(b)
    list(engine.generate(list(b"say hello"), 4))
    assert wait_for(lambda: len(b.batches) > 12)  # timing at idle has started
    t0 = time.perf_counter()
    answer = engine.generate(list(b"say hello again"), 4)
    next(answer)
    waited = time.perf_counter() - t0
    assert waited < 0.5, waited
    answer.close()
    engine.close()


def test_a_reset_while_the_engine_times_at_idle_waits_for_the_batch_to_be_undone():
    b = ClockedBackend("hello world, hello world", base=0.01, row=0.01)
    events: list[tuple[str, str]] = []  # (thread, what), in order
    evaluate, roll_back = b.eval, b.rollback

    def logged_eval(ids, n_logits=None):
        events.append((threading.current_thread().name, "eval"))
        return evaluate(ids, n_logits)

    def logged_rollback(n):
        events.append((threading.current_thread().name, "rollback"))
        return roll_back(n)

    b.eval, b.rollback = logged_eval, logged_rollback
    engine = engine_on(b)
    list(engine.generate(list(b"say hello"), 4))
    assert wait_for(lambda: len(b.batches) > 8)  # timing at idle has started
    for _ in range(20):
        engine.reset()
        time.sleep(0.013)
    engine.close()
    idle_batch_open = False
    for thread, what in events:
        if thread == "edgespec-idle-timing":
            idle_batch_open = what == "eval"
        else:
            assert not idle_batch_open, "a reset rolled the cache back under an idle batch"
    assert b.n_past == 0


def test_nothing_is_timed_while_other_programs_keep_the_cores_busy(monkeypatch):
    b = ClockedBackend("hello world")
    engine = engine_on(b)
    monkeypatch.setattr(engine.threads, "contended", lambda cores: True)
    list(engine.generate(list(b"say hello"), 4))
    ran = len(b.batches)
    time.sleep(0.6)
    assert engine._idle_timing.batches == 0  # batches timed beside the load are not kept
    assert not engine.controller.cost.complete
    assert len(b.batches) - ran < 40  # and after a burst it waits before trying again
    engine.close()


def test_an_engine_dropped_without_closing_stops_timing():
    b = ClockedBackend("hello world")
    engine = engine_on(b)
    list(engine.generate(list(b"say hello"), 4))
    assert wait_for(lambda: len(b.batches) > 4)
    del engine
    gc.collect()
    assert wait_for(lambda: not any(t.name == "edgespec-idle-timing" for t in threading.enumerate()), timeout=5)


@pytest.mark.real_model
def test_a_chat_that_timed_at_idle_between_turns_answers_as_one_that_did_not(smollm2_path):
    """On a real model: between two turns the idle engine times batches after what the
    cache holds and undoes each, so the second turn reuses the first's cache and writes
    what an engine that timed nothing writes; the turn starts within one batch. Both verify
    every proposal in full, so their batches, and so their rounding, are the same."""
    from edgespec.api import EdgeSpec
    from edgespec.runtimes.llamacpp import LlamaCppBackend

    turn = [{"role": "user", "content": "Name three colours."}]
    answers = {}
    with LlamaCppBackend(smollm2_path, n_ctx=1024, n_threads=2) as backend:
        host = EdgeSpec(backend, drafter="none")
        for idle_timing in (True, False):
            controller = always_draft(max_k=8)
            controller.cost.drift = float("inf")  # timings at idle must not move that belief either
            engine = Engine(backend, make_drafter("lookup", backend.n_vocab, controller), controller=controller,
                            calibrate=idle_timing, idle_timing=idle_timing)
            engine.reset()
            first = list(engine.generate(host.chat_ids(turn), 24))
            if idle_timing:
                assert wait_for(lambda: not engine._idle_timing.due())  # every size timed, each batch undone
            conversation = [*turn, {"role": "assistant", "content": backend.tokenizer.decode(first)},
                            {"role": "user", "content": "And three more."}]
            t0 = time.perf_counter()
            second = list(engine.generate(host.chat_ids(conversation), 24))
            if idle_timing:
                assert time.perf_counter() - t0 - engine.last_stats.total_s < 0.5  # waited one batch at most
            answers[idle_timing] = (first, second)
            engine.close()
    assert answers[True] == answers[False]
