"""Other programs on the cores: measured, so that timings taken beside them are not
trusted (a bench says so; a cost curve is not cached)."""

import subprocess
import sys
import time

import psutil

from edgespec.cpu_load import OtherLoad, contends

SPIN = "import time\nwhile True: time.perf_counter()"


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


def test_a_span_too_short_for_the_clock_is_not_judged():
    assert OtherLoad().cores() is None


def test_a_load_contends_only_when_it_takes_cores_the_threads_wanted():
    cores = psutil.cpu_count()
    assert contends(0.65, threads=cores)  # a load beside threads on every core
    assert not contends(0.02, threads=cores)  # an idle machine's noise
    assert not contends(0.65, threads=cores - 1) or cores == 1  # a spare core took it


def test_a_curve_timed_while_other_programs_took_the_cores_is_not_cached(tmp_path, monkeypatch):
    """The cost curve is cached to price later runs on this machine: timed beside a load,
    it would describe the load. A later run, once the load is gone, times it and caches it."""
    import tiny_gguf

    from edgespec import calibration
    from edgespec.controller import DraftController
    from edgespec.drafters import make_drafter
    from edgespec.engine import Engine
    from edgespec.runtimes.llamacpp import LlamaCppBackend

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
        assert controller.cost.calibrated  # it was timed, under the load
        assert contends(engine.last_stats.other_cores, cores)
        assert not calibration.load(b.cost_key(), calibration.CostModel(max_n=3))  # and not cached

        for _ in range(10):  # the kernel's own bursts (writing back files) count as others: wait them out
            controller = DraftController(max_k=2)  # a later run, on quiet cores: it times the curve again
            engine = Engine(b, make_drafter("lookup", b.n_vocab, controller), controller=controller)
            list(engine.generate(prompt, 64))
            if not contends(engine.last_stats.other_cores, cores):
                break
        assert not contends(engine.last_stats.other_cores, cores)
        assert calibration.load(b.cost_key(), calibration.CostModel(max_n=3))
