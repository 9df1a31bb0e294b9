"""Other programs on the cores: measured, so that timings taken beside them are not
trusted (a bench says so; a cost curve is not cached)."""

import subprocess
import sys
import time

import psutil

from edgespec.speculative.cpu_load import OtherLoad, contends

# busy until killed, or until its parent is gone: a pytest killed by a signal leaves no spinner
SPIN = "import os, time\nparent = os.getppid()\nwhile os.getppid() == parent: time.perf_counter()"


def spinners(n: int) -> list[subprocess.Popen]:
    """n programs each busy on a core until killed."""
    return [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def test_a_program_busy_beside_this_one_is_measured_and_this_ones_own_work_is_not():
    load = OtherLoad()
    busy = spinners(1)
    try:
        time.sleep(1.2)
        beside = load.cores()  # measured while it runs: not yet this process's reaped child
    finally:
        stop(busy)
    assert beside is not None and beside > 0.7

    load = OtherLoad()
    t = time.perf_counter()
    while time.perf_counter() - t < 1.2:  # this process busy on a core
        pass
    assert load.cores() < 0.7  # counted, it would be a whole core and more


def test_a_program_that_started_a_moment_ago_is_not_averaged_with_the_quiet_before_it():
    from edgespec.speculative.cpu_load import RecentLoad

    since_start, recent = OtherLoad(), RecentLoad(span=2.0)
    time.sleep(2.5)  # quiet: a chat waits for the next message
    busy = spinners(1)
    try:
        time.sleep(2.2)
        whole, last = since_start.cores(), recent.cores()
    finally:
        stop(busy)
        recent.close()
    assert last > 0.7  # the last two seconds: busy on a core
    assert whole < last - 0.25  # the whole wait: less than half of it


def test_a_span_too_short_for_the_clock_is_not_judged():
    from edgespec.speculative.cpu_load import RecentLoad

    assert OtherLoad().cores() is None
    recent = RecentLoad()
    assert recent.cores() is None
    recent.close()


def test_a_load_contends_only_when_it_takes_cores_the_threads_wanted():
    cores = psutil.cpu_count()
    assert contends(0.65, threads=cores)  # a load beside threads on every core
    assert not contends(0.02, threads=cores)  # an idle machine's noise
    assert not contends(0.65, threads=cores - 1) or cores == 1  # a spare core took it


def test_a_curve_learned_while_other_programs_took_the_cores_is_not_cached(tmp_path, monkeypatch):
    """The cost curve is cached to price later runs on this machine: learned beside a load,
    it would describe the load. A later run, once the load is gone, learns it and caches it."""
    import tiny_gguf

    from edgespec.drafters import make_drafter
    from edgespec.runtimes.llamacpp import LlamaCppBackend
    from edgespec.speculative import calibration
    from edgespec.speculative.controller import DraftController
    from edgespec.speculative.engine import Engine

    class Slow(LlamaCppBackend):
        def eval(self, ids, n_logits=None):
            time.sleep(0.03)  # a generation long enough for the clock to judge its load
            return super().eval(ids, n_logits)

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    cores = psutil.cpu_count()
    with Slow(tiny_gguf.write(tmp_path / "tiny.gguf"), n_ctx=512, n_threads=cores) as b:
        controller = DraftController(max_k=2)
        engine = Engine(b, make_drafter("lookup", b.n_vocab, controller), controller=controller)
        prompt = b.tokenizer.encode("the the the the")
        busy = spinners(cores)
        try:
            list(engine.generate(prompt, 64))
        finally:
            stop(busy)
        assert controller.cost.calibrated  # it was learned, under the load
        assert contends(engine.last_stats.other_cores, cores)
        assert not calibration.load(b.cost_key(), calibration.CostModel(max_n=3))  # and not cached

        for _ in range(10):  # the kernel's own bursts (writing back files) count as others: wait them out
            controller = DraftController(max_k=2)  # a later run, on quiet cores: it learns the curve again
            engine = Engine(b, make_drafter("lookup", b.n_vocab, controller), controller=controller)
            list(engine.generate(prompt, 64))
            if not contends(engine.last_stats.other_cores, cores):
                break
        assert not contends(engine.last_stats.other_cores, cores)
        assert calibration.load(b.cost_key(), calibration.CostModel(max_n=3))


def test_a_drafters_step_cost_is_kept_only_from_generations_on_quiet_cores(tmp_path, monkeypatch):
    """What one drafted token costs a model drafter prices it in later plans: drafted beside
    a load, its steps describe the load, so that generation is left out of the kept mean."""
    import platform

    from helpers import always_draft
    from edgespec.drafters import ModelDrafter
    from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
    from edgespec.speculative import calibration, engine as engine_module
    from edgespec.speculative.engine import Engine
    from prompts import PROMPTS

    class Keyed(ReferenceBackend):
        def cost_key(self):
            return f"drafter-model|{platform.node()}|CPU"

    class Measured:  # other programs' load as the engine reads it, set by the test
        other = 0.0

        def cores(self):
            return Measured.other

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    monkeypatch.setattr(engine_module, "OtherLoad", Measured)
    model = ReferenceModel(seed=3)
    target = ReferenceBackend(model)
    drafter = ModelDrafter(Keyed(model), p_min=0.0)
    engine = Engine(target, drafter, controller=always_draft(4), calibrate=False)  # untimed: it drafts throughout
    prompt = target.tokenizer.encode(PROMPTS[0])
    kept = lambda: calibration.latest(calibration.DRAFTER_STEP + "drafter-model")  # noqa: E731

    Measured.other = 2.0  # two cores' worth of other work: contended on any machine here
    list(engine.generate(prompt, 40))
    loaded_n, loaded_s = drafter.cost.token_cost
    assert loaded_n >= calibration.MIN_STEPS  # it drafted plenty
    assert kept() is None  # and none of it was kept

    Measured.other = 0.0
    list(engine.generate(prompt, 40))
    n, s = drafter.cost.token_cost
    assert kept() == {1: (s - loaded_s) / (n - loaded_n)}  # the quiet generation's mean alone


def test_threads_are_given_up_to_programs_that_want_most_of_a_core(monkeypatch):
    """The 2-core VM's measurements (cpu_load.py): 2 threads beside a program busy 25%, 50%,
    75% and 100% of the time measured it at 0.14, 0.26, 0.39 and 0.68 cores, and decoded at
    39.2, 36.1, 26.1 and 15.8 tokens/s against 28.0, 24.6, 27.2 and 22.6 on one thread."""
    from edgespec.speculative.cpu_load import fitting_threads

    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 2)
    beside_two = [fitting_threads(o, threads=2, most=2, running=True) for o in (0.0, 0.14, 0.26, 0.39, 0.68)]
    assert beside_two == [2, 2, 2, 1, 1]  # the last two: as fast or faster on one thread
    beside_one = [fitting_threads(o, threads=1, most=2, running=True) for o in (0.0, 0.27, 0.51, 0.76, 1.01)]
    assert beside_one == [2, 2, 2, 1, 1]  # the same programs, measured whole beside one thread
    assert fitting_threads(1.0, threads=2, most=2, running=False) == 1  # measured while idle: as wanted
    assert fitting_threads(1.9, threads=2, most=2, running=False) == 1  # never fewer than one
    assert fitting_threads(0.0, threads=1, most=1, running=False) == 1  # never more than asked for


def test_a_chat_beside_a_busy_program_decodes_on_the_cores_it_leaves(tmp_path, monkeypatch):
    """Between two turns of a chat, another program starts and keeps all cores but one busy:
    the next answer is computed on one thread; once it stops, on all of them again."""
    import pytest
    import tiny_gguf

    from edgespec.api import EdgeSpec
    from edgespec.runtimes.llamacpp import LlamaCppBackend, default_threads
    from edgespec.speculative import calibration

    cores = psutil.cpu_count()
    if min(cores, default_threads()) < 2:
        pytest.skip("one core: no thread to give up")
    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    llm = EdgeSpec(LlamaCppBackend(tiny_gguf.write(tmp_path / "tiny.gguf"), n_ctx=512), drafter="lookup")
    prompt = "the the the the"
    llm.generate(prompt, max_tokens=16)
    assert llm.last_stats.threads == default_threads()

    busy = spinners(cores - 1)
    try:
        time.sleep(1.5)  # the user types the next message
        answer = llm.generate(prompt, max_tokens=16)
    finally:
        stop(busy)
    assert llm.last_stats.threads == 1
    assert "1 of" in answer.stats.summary()  # and the user is told why

    for _ in range(10):  # the kernel's own bursts (writing back files) count as others: wait them out
        time.sleep(1.5)
        llm.generate(prompt, max_tokens=16)
        if llm.last_stats.threads == default_threads():
            break
    assert llm.last_stats.threads == default_threads()
    llm.close()


def test_a_program_that_starts_mid_answer_gets_its_core_within_about_a_second(tmp_path, monkeypatch):
    import threading

    import pytest
    import tiny_gguf

    from edgespec.api import EdgeSpec
    from edgespec.runtimes.llamacpp import LlamaCppBackend, default_threads
    from edgespec.speculative import calibration

    class Slow(LlamaCppBackend):
        def eval(self, ids, n_logits=None):
            time.sleep(0.03)  # an answer long enough to be watched: 80 steps, 2.4 s
            return super().eval(ids, n_logits)

    cores = psutil.cpu_count()
    if min(cores, default_threads()) < 2:
        pytest.skip("one core: no thread to give up")
    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    llm = EdgeSpec(Slow(tiny_gguf.write(tmp_path / "tiny.gguf"), n_ctx=512), drafter="none")
    busy: list = []
    later = threading.Timer(0.3, lambda: busy.extend(spinners(cores - 1)))
    later.start()
    try:
        llm.generate("the the the the", max_tokens=80)
    finally:
        later.join()
        stop(busy)
    assert llm.last_stats.threads == 1 and llm.last_stats.threads_most == default_threads()
    llm.close()


def test_a_backend_opened_with_more_threads_than_cores_is_not_reported_as_crowded_out(monkeypatch):
    """Threads beyond the core count only wait on each other: the engine computes on at most
    one per core, and on quiet cores says nothing of other programs."""
    from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
    from edgespec.speculative import engine as engine_module, threads as threads_module
    from edgespec.speculative.engine import Engine

    class Quiet:  # nothing else runs, as the engine reads it
        def cores(self):
            return 0.0

        def seconds(self):
            return 0.0

        def close(self):
            pass

    class Threaded(ReferenceBackend):
        n_threads = 4 * (psutil.cpu_count() or 1)

        def set_threads(self, n):
            self.n_threads = n
            return True

    for module in (engine_module, threads_module):
        monkeypatch.setattr(module, "OtherLoad", Quiet)
    monkeypatch.setattr(threads_module, "RecentLoad", Quiet)
    backend = Threaded(ReferenceModel(seed=3))
    engine = Engine(backend, None, adapt_threads=True)
    list(engine.generate(backend.tokenizer.encode("the the the"), 8))
    assert engine.last_stats.threads == engine.last_stats.threads_most == psutil.cpu_count()
    assert "other programs are busy" not in engine.last_stats.summary()
    engine.close()


def test_a_program_wanting_half_a_core_is_measured_taking_about_half_of_one():
    """`python3 -m edgespec.bench.other_programs` runs such programs beside decoding."""
    from edgespec.bench.other_programs import busy_program

    with busy_program(0.5):
        time.sleep(0.3)  # started
        load = OtherLoad()
        time.sleep(1.5)
        cores = load.cores()
    assert 0.25 < cores < 0.9


def test_decoding_beside_other_programs_is_tabled_per_share_and_thread_count(monkeypatch):
    from edgespec.api import EdgeSpec
    from edgespec.bench import other_programs
    from edgespec.bench.record import OTHER_PROGRAMS, markdown, record
    from edgespec.runtimes.reference import ReferenceBackend

    monkeypatch.setattr(other_programs, "SHARES", (0.0, 1.0))
    llm = EdgeSpec(ReferenceBackend(), drafter="none", threads=2)
    rows = other_programs.measure(llm, llm.tokenize("Hello there"), most=2, max_tokens=4, rounds=1)
    assert [(r["wants"], r["threads"]) for r in rows] == [(0.0, 2), (0.0, 1), (1.0, 2), (1.0, 1)]
    assert all(r["tokens_per_s"] > 0 for r in rows)
    table = markdown(record(rows, "reference", "python3 -m edgespec.bench.other_programs", kind=OTHER_PROGRAMS,
                            max_tokens=4, rounds=1))
    assert "| the program wants, of a core | cores measured beside 2 threads | beside 1 thread |" in table
    assert "| 1.00 |" in table
