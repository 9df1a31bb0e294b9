"""Adaptive draft length: draft what pays, nothing when nothing does."""

from edgespec.controller import AcceptanceModel, CostModel, DraftController


def controller_with_costs(costs):
    c = DraftController(max_k=8)
    for n, t in costs.items():
        c.cost.observe(n, t)
    return c


def test_drafts_long_when_verification_is_cheap_and_drafts_are_accepted():
    c = controller_with_costs({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3, 9: 1.35})
    for _ in range(50):
        c.record("lookup/n8+", 8, 8, 9, 1.35)
    assert c.choose("lookup/n8+", 8) == 8


def test_drafts_nothing_when_batches_cost_as_much_as_separate_tokens():
    c = controller_with_costs({1: 1.0, 2: 2.0, 4: 4.0, 9: 9.0})
    for _ in range(50):
        c.record("recycle", 2, 0, 3, 3.0)
    choices = [c.choose("recycle", 4) for _ in range(64)]
    # mostly 0, with a rare one-token probe so a changed situation is noticed
    assert choices.count(0) == 62 and choices.count(1) == 2


def test_a_draft_minimum_verifies_drafts_that_do_not_pay():
    c = controller_with_costs({1: 1.0, 2: 2.0, 4: 4.0, 9: 9.0})
    for _ in range(50):
        c.record("model", 2, 0, 3, 3.0)
    assert c.choose("model", 8) == 0  # nothing pays
    c.min_k = 3  # the bench's --draft-min: measure acceptance anyway
    assert [c.choose("model", 8) for _ in range(64)] == [3] * 64
    assert c.choose("model", 2) == 2  # never more than the drafter offers


def test_acceptance_is_learned_per_kind_of_draft():
    c = controller_with_costs({1: 1.0, 2: 1.3, 3: 1.6, 5: 2.2})
    for _ in range(40):
        c.record("good", 4, 4, 5, 2.2)
        c.record("bad", 4, 0, 5, 2.2)
    assert c.choose("good", 4) == 4
    assert c.choose("bad", 4) == 0


def test_cost_is_interpolated_between_measured_batch_sizes():
    c = controller_with_costs({1: 1.0, 4: 1.6})
    costs = c.cost.costs()
    assert abs(costs[2] - 1.2) < 1e-9 and abs(costs[3] - 1.4) < 1e-9
    assert costs[6] > costs[4]  # extrapolated with the measured slope


def test_the_engine_asks_a_model_drafter_only_when_drafting_pays():
    """A model drafter pays for each token it drafts: the engine plans before asking."""
    from conftest import ScriptedBackend
    from edgespec.drafters.base import Draft, Drafter
    from edgespec.engine import Engine

    class SlowModel(Drafter):
        model_key = "slow"

        def __init__(self, cost):
            self.cost, self.asked = cost, 0

        @property
        def cost_per_token(self):
            return self.cost

        def propose(self, history, k):
            self.asked += 1
            return Draft([ord("x")] * k, "slow")  # always wrong

    backend = ScriptedBackend("a" * 300)
    c = controller_with_costs({1: 1.0, 2: 1.1, 9: 1.8})
    c.cost.alpha = 0.0  # keep these costs whatever the real timings are
    drafter = SlowModel(cost=2.0)  # two target steps per drafted token: never worth it
    out = list(Engine(backend, drafter, controller=c, calibrate=False).generate(list(b"go"), 200))
    assert out == [ord("a")] * 200
    assert drafter.asked <= 200 // c.explore_every + 1  # only the rare probes


def test_failed_probes_get_rarer_and_a_success_restores_them():
    c = controller_with_costs({1: 1.0, 2: 2.0, 9: 9.0})
    probes = []
    for step in range(32 + 64 + 128):
        if c.choose("model", 4) == 1:
            probes.append(step)
            c.record_nothing("model")  # asked, and it had nothing worth drafting
    assert probes == [31, 31 + 64, 31 + 64 + 128]
    c._probing.add("model")
    c.record("model", 1, 1, 2, 2.0)  # a probe that was accepted
    assert c._interval["model"] == c.explore_every


def test_a_dear_probe_comes_no_more_often_than_its_share_of_decoding_allows():
    """A declined model drafter must catch up before a probe: when that costs two
    target steps, failed probes at 2% of the decoding time come every 100 steps."""
    c = controller_with_costs({1: 1.0, 2: 2.0, 9: 9.0})
    assert c.probe_share == 0.02
    probes = []
    for step in range(100 + 100 + 128):
        if c.choose("model", 4, probe_seconds=2.0) == 1:
            probes.append(step)
            c.record_nothing("model")
    assert probes == [99, 99 + 100, 99 + 100 + 128]  # the doubling takes over once it is the rarer


def test_a_stale_calibration_is_timed_again_once_decoding_finds_it_wrong(tmp_path, monkeypatch):
    """A calibration taken under a passing load (here: ten seconds a token) is not kept:
    decoding refines only the batch sizes it uses, so when those have moved far from
    the curve, the whole curve is forgotten and the next generation times every size."""
    import tiny_gguf

    from edgespec import calibration
    from edgespec.drafters import make_drafter
    from edgespec.engine import Engine
    from edgespec.runtimes.llamacpp import LlamaCppBackend

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    with LlamaCppBackend(tiny_gguf.write(tmp_path / "tiny.gguf"), n_ctx=256, n_threads=1) as b:
        stale = calibration.CostModel(max_n=5)
        for n in range(1, 6):
            stale.observe(n, 10.0 + n)
        calibration.save(b.cost_key(), stale)
        controller = DraftController(max_k=4)
        engine = Engine(b, make_drafter("lookup", b.n_vocab, controller), controller=controller)
        prompt = b.tokenizer.encode("the the the the the the the the")
        # long enough that re-timing is due (RETIME_SHARE of the decoding time exceeds what
        # loading the cached curve took): 48 tokens gave only 25x that load time, 20x needed
        list(engine.generate(prompt, 200))
        assert controller.cost.drifted()
        assert not calibration.load(b.cost_key(), calibration.CostModel(max_n=5))  # forgotten
        list(engine.generate(prompt, 4))  # starts by timing every size again
        timed = calibration.CostModel(max_n=5)
        assert calibration.load(b.cost_key(), timed)
        assert set(timed.measured) == set(range(1, 6))
        assert max(timed.measured.values()) < 1.0  # a tiny model's milliseconds, every size


def test_a_load_that_comes_and_goes_costs_few_re_timings(tmp_path, monkeypatch):
    """Another program that takes the cores every other chat turn makes every curve
    drift. Timing the curve again at each such turn would cost more than the decoding
    (here: a tiny model, each of whose steps the load lengthens by 10 ms); re-timings
    wait until they cost a twentieth of the decoding time since the last."""
    import time

    import tiny_gguf

    from edgespec import calibration
    from edgespec.drafters import make_drafter
    from edgespec.engine import RETIME_SHARE, Engine
    from edgespec.runtimes.llamacpp import LlamaCppBackend

    class SharedCores(LlamaCppBackend):
        loaded = False

        def eval(self, ids, n_logits=None):
            if self.loaded:
                time.sleep(0.01)  # many times the tiny model's own step
            return super().eval(ids, n_logits)

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    with SharedCores(tiny_gguf.write(tmp_path / "tiny.gguf"), n_ctx=512, n_threads=1) as b:
        controller = DraftController(max_k=2)
        engine = Engine(b, make_drafter("lookup", b.n_vocab, controller), controller=controller)
        timings = []

        def timed(*args, **kw):
            t0 = time.perf_counter()
            out = Engine.calibrate(engine, *args, **kw)
            timings.append(time.perf_counter() - t0)
            return out

        monkeypatch.setattr(engine, "calibrate", timed)
        prompt = b.tokenizer.encode("the the the the")
        decoding = 0.0
        for turn in range(24):
            b.loaded = turn % 2 == 1
            engine.reset()
            list(engine.generate(prompt, 12))
            decoding += engine.last_stats.total_s - engine.last_stats.prefill_s
        assert len(timings) >= 2  # the load did make the curve drift, and it was timed again
        # every re-timing after the first waited for its share of decoding; the last may overshoot by one
        assert sum(timings[1:]) <= RETIME_SHARE * decoding + 2 * max(timings)


def test_a_curve_that_decoding_confirms_is_not_timed_again():
    cost = CostModel(max_n=5)
    for n in range(1, 6):
        cost.observe(n, 0.010 * (1 + 0.1 * n))
    cost.mark_timed()
    for _ in range(20):
        cost.observe(1, 0.0115)  # 4% off: noise, not a changed machine
        cost.observe(3, 0.0120)
    assert not cost.drifted()
    for _ in range(8):
        cost.observe(3, 0.030)  # a size decoding uses now costs twice what was timed
    assert cost.drifted()


def test_one_stalled_step_does_not_stop_speculation():
    """A 2-token batch that stalled (a page fault, a burst on a shared core) is one
    timing among many: drafting that pays goes on paying."""
    c = controller_with_costs({1: 1.0, 2: 1.2, 3: 1.4, 9: 2.6})
    c.cost.mark_timed()
    for _ in range(30):
        c.record("lookup/n8+", 1, 1, 2, 1.2)
    assert c.choose("lookup/n8+", 1) == 1
    c.record("lookup/n8+", 1, 1, 2, 12.0)  # ten times what it costs
    assert c.choose("lookup/n8+", 1) == 1
    costs = c.cost.costs()
    assert costs[2] / costs[1] < 1.3


def test_a_machine_slower_than_when_it_was_timed_keeps_the_ratios_between_batch_sizes():
    """Decoding that only ever verifies 4 tokens still learns what one token costs now:
    every size moves with the machine's speed, so the ratios that draft lengths are
    chosen by stay the timed ones."""
    cost = CostModel(max_n=5)
    for n in range(1, 6):
        cost.observe(n, 0.010 * (1 + 0.5 * (n - 1)))
    cost.mark_timed()
    for _ in range(40):
        cost.observe(4, 2 * 0.025)  # everything is twice as slow as when timed
    c = cost.costs()
    assert abs(c[4] - 0.050) < 0.003
    assert abs(c[1] - 0.020) < 0.002  # never observed, yet twice the timed cost
    assert abs(c[4] / c[1] - 2.5) < 0.1


def test_a_curve_cached_in_the_old_format_is_timed_again(tmp_path, monkeypatch):
    """Curves written before the shared speed factor mixed timings from different
    moments: they are not loaded, so the next generation times every size."""
    import json

    from edgespec import calibration

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path)
    calibration.save("model|2|cpu", controller_with_costs({1: 0.03, 2: 0.05}).cost)
    assert calibration.load("model|2|cpu", CostModel(max_n=3))
    path = calibration._path("model|2|cpu")
    old = json.loads(path.read_text())
    del old["format"]
    path.write_text(json.dumps(old))
    assert not calibration.load("model|2|cpu", CostModel(max_n=3))


def test_a_curve_with_a_batch_cheaper_than_half_a_token_is_neither_kept_nor_loaded(tmp_path, monkeypatch):
    """A batch reads the weights once, as one token does: a curve that puts 6 tokens at
    0.3x one token was timed while something else took the cores (seen here after a
    re-timing under a concurrent test run), and drafting by it would be wrong."""
    import json

    from edgespec import calibration

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path)
    calibration.save("model|2|cpu", controller_with_costs({1: 0.07, 2: 0.10, 4: 0.11}).cost)
    assert calibration.load("model|2|cpu", CostModel(max_n=6))
    calibration.save("model|2|cpu", controller_with_costs({1: 0.07, 2: 0.17, 6: 0.02}).cost)
    assert not calibration._path("model|2|cpu").exists()  # the stale good curve went too
    path = calibration._path("model|2|cpu")  # written by an earlier version, without the check
    path.write_text(json.dumps({"key": "model|2|cpu", "format": calibration.CURVE_FORMAT,
                                "seconds": {"1": 0.07, "2": 0.17, "6": 0.02}}))
    assert not calibration.load("model|2|cpu", CostModel(max_n=6))


def test_a_kind_that_paid_in_earlier_runs_drafts_from_the_first_step():
    """At the flat prior (half the drafts accepted) nothing pays where 2 tokens cost 1.8x one;
    with the kind's long-run rate from earlier runs as its prior, it drafts at once."""
    costs = {1: 1.0, 2: 1.8, 3: 2.2, 9: 4.0}
    earlier = controller_with_costs(costs)
    for _ in range(30):
        earlier.record("lookup/n4", 2, 2, 3, 2.2)
    new = controller_with_costs(costs)
    assert new.choose("lookup/n4", 2) == 0
    new.acceptance.seed(earlier.acceptance.take_counts())
    assert new.choose("lookup/n4", 2) == 2
    for _ in range(5):  # this run's own evidence leads within a few steps
        new.record("lookup/n4", 2, 0, 3, 2.2)
    assert new.choose("lookup/n4", 2) == 0
    assert earlier.acceptance.take_counts() == {}  # counted once


def test_counts_that_are_not_the_models_own_are_not_seeded():
    c = DraftController(max_k=4)
    c.acceptance.seed({"a": [[2.0], [1.0]], "b": "x", "c": [[1.0, 1.0], [1.0]], "d": [[float("nan")], [1.0]],
                       "e": [[1.0], [2.0], [3.0]]})
    assert all(list(c.acceptance.rates(k)) == [0.5] * 4 for k in "abcde")


def test_kinds_are_kept_per_target_and_a_model_drafters_per_drafter_file(tmp_path, monkeypatch):
    """A new process on the same target starts from what greedy runs counted of each kind;
    a model drafter's kind ("model") is carried only to the same drafter model file."""
    from types import SimpleNamespace

    from edgespec import calibration

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    target, small, other = (tmp_path / n for n in ("target.gguf", "small.gguf", "other.gguf"))
    for p in (target, small, other):
        p.write_bytes(b"GGUF")
    drafting = [SimpleNamespace(model_key="model", backend=SimpleNamespace(path=small))]
    calibration.save_kinds(target, drafting, {"lookup/n2": [[1.0], [2.0]], "model": [[3.0], [4.0]]})
    calibration.save_kinds(target, drafting, {"lookup/n2": [[1.0, 1.0], [1.0, 1.0]]})  # runs add up
    assert calibration.load_kinds(target, drafting) == {"lookup/n2": [[2.0, 1.0], [3.0, 1.0]], "model": [[3.0], [4.0]]}
    with_other = [SimpleNamespace(model_key="model", backend=SimpleNamespace(path=other))]
    assert calibration.load_kinds(target, with_other) == {"lookup/n2": [[2.0, 1.0], [3.0, 1.0]]}
    assert calibration.load_kinds(small, drafting) == {}  # another target counted nothing yet
    calibration.save_kinds(target, with_other, {"model": [[0.0], [5.0]]})  # the first drafter's stays
    assert calibration.load_kinds(target, drafting)["model"] == [[3.0], [4.0]]
    assert calibration.load_kinds(target, with_other)["model"] == [[0.0], [5.0]]
    calibration.save_kinds(target, drafting, {"lookup/n2": [[5000.0], [5000.0]]})
    assert calibration.load_kinds(target, drafting)["lookup/n2"] == [[2501.0, 0.5], [2501.5, 0.5]]  # halved


def test_a_new_engine_on_the_same_model_starts_from_what_earlier_runs_counted(tmp_path, monkeypatch):
    import tiny_gguf

    from edgespec import calibration
    from edgespec.drafters import make_drafter
    from edgespec.engine import Engine
    from edgespec.runtimes.llamacpp import LlamaCppBackend

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    with LlamaCppBackend(tiny_gguf.write(tmp_path / "tiny.gguf"), n_ctx=256, n_threads=1) as b:
        prompt = b.tokenizer.encode("the the the the the the the the")
        first = DraftController(max_k=4)
        list(Engine(b, make_drafter("lookup", b.n_vocab, first), controller=first).generate(prompt, 32))
        counted = calibration.load_kinds(b.path, [])
        assert counted and all(k.startswith("lookup/") for k in counted)
        second = DraftController(max_k=4)
        engine = Engine(b, make_drafter("lookup", b.n_vocab, second), controller=second)
        list(engine.generate(prompt, 1))  # one token: nothing drafted, nothing learned in this run
        expected = AcceptanceModel(max_k=4)
        expected.seed(counted)
        for kind in counted:
            assert list(second.acceptance.rates(kind)) == list(expected.rates(kind)) != [0.5] * 4
