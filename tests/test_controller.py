"""Adaptive draft length: draft what pays, nothing when nothing does."""

import numpy as np
import pytest

from edgespec.speculative.acceptance import AcceptanceModel
from edgespec.speculative.cost_curve import LEARN_AFTER, OPTIMISTIC_ROW, CostModel, prior_units
from edgespec.speculative.controller import PROBE_BURST, DraftController
from edgespec.speculative.drafter import Kind, ModelCost


def controller_with_costs(costs):
    c = DraftController(max_k=8)
    c.cost.set_timed(costs)
    return c


def test_drafts_long_when_verification_is_cheap_and_drafts_are_accepted():
    c = controller_with_costs({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3, 9: 1.35})
    for _ in range(50):
        c.record(Kind.parse("lookup/n8+"), 8, 8, 9, 1.35)
    assert c.choose(Kind.parse("lookup/n8+"), 8) == 8


def test_drafts_nothing_when_batches_cost_as_much_as_separate_tokens():
    c = controller_with_costs({1: 1.0, 2: 2.0, 4: 4.0, 9: 9.0})
    for _ in range(50):
        c.record(Kind.parse("recycle"), 2, 0, 3, 3.0)
    choices = [c.choose(Kind.parse("recycle"), 4) for _ in range(64)]
    # mostly 0, with a rare one-token probe so a changed situation is noticed
    assert choices.count(0) == 62 and choices.count(1) == 2


def test_a_draft_predicted_to_only_break_even_is_declined():
    """Two tokens cost 1.5x one. Accepted 53% of the time, a one-token draft is predicted to
    gain 2% (1.53 / 1.5): within its estimate's error, so it is declined (`DRAFT_MARGIN`);
    accepted 70% of the time it gains 13% and is verified."""
    for rate, k in ((0.53, 0), (0.70, 1)):
        c = controller_with_costs({1: 1.0, 2: 1.5})
        c.acceptance.seed({"lookup/n2": [[rate * 1000], [1000]]})
        assert c.choose(Kind.parse("lookup/n2"), 1, explore=False) == k


def test_a_draft_minimum_verifies_drafts_that_do_not_pay():
    c = controller_with_costs({1: 1.0, 2: 2.0, 4: 4.0, 9: 9.0})
    for _ in range(50):
        c.record(Kind.parse("model"), 2, 0, 3, 3.0)
    assert c.choose(Kind.parse("model"), 8) == 0  # nothing pays
    c.min_k = 3  # the bench's --draft-min: measure acceptance anyway
    assert [c.choose(Kind.parse("model"), 8) for _ in range(64)] == [3] * 64
    assert c.choose(Kind.parse("model"), 2) == 2  # never more than the drafter offers


def test_acceptance_is_learned_per_kind_of_draft():
    c = controller_with_costs({1: 1.0, 2: 1.3, 3: 1.6, 5: 2.2})
    for _ in range(40):
        c.record(Kind.parse("good"), 4, 4, 5, 2.2)
        c.record(Kind.parse("bad"), 4, 0, 5, 2.2)
    assert c.choose(Kind.parse("good"), 4) == 4
    assert c.choose(Kind.parse("bad"), 4) == 0


def test_the_engine_asks_a_model_drafter_only_when_drafting_pays():
    """A model drafter pays for each token it drafts: the engine plans before asking."""
    from helpers import ScriptedBackend
    from edgespec.speculative.drafter import Draft, Drafter, ModelCost
    from edgespec.speculative.engine import Engine

    class SlowModel(Drafter):
        def __init__(self, seconds_per_token):
            self.cost, self.asked = ModelCost(Kind("slow"), backend), 0
            self.cost.steps, self.cost.step_s = 1, seconds_per_token

        def propose(self, history, k):
            self.asked += 1
            return Draft([ord("x")] * k, self.cost.kind)  # always wrong

    backend = ScriptedBackend("a" * 300)
    c = controller_with_costs({1: 1.0, 2: 1.1, 9: 1.8})
    c.cost.alpha = 0.0  # keep these costs whatever the real timings are
    drafter = SlowModel(seconds_per_token=2.0)  # two target steps per drafted token: never worth it
    out = list(Engine(backend, drafter, controller=c, calibrate=False).generate(list(b"go"), 200))
    assert out == [ord("a")] * 200
    assert drafter.asked <= 200 // c.explore_every + 1  # only the rare probes


def test_a_draft_that_runs_past_the_end_of_the_answer_is_verified_only_up_to_that_end():
    """A copy of a chat question runs into its end-of-turn token and on into the template:
    the rows after an end-of-generation token would be verified for nothing."""
    from helpers import ScriptedBackend, always_draft
    from edgespec.runtimes.reference import ByteTokenizer
    from edgespec.speculative.drafter import Draft, Drafter
    from edgespec.speculative.engine import Engine

    class CopiesPastTheEnd(Drafter):
        def propose(self, history, k):
            return Draft([*b"k!", ByteTokenizer.EOS, *b"<im_start>"][:k], Kind("copy"))

    backend = ScriptedBackend("ok!")
    batches = []
    evaluate = backend.eval
    backend.eval = lambda ids, n_logits=None: batches.append(len(ids)) or evaluate(ids, n_logits)
    engine = Engine(backend, CopiesPastTheEnd(), controller=always_draft(16), calibrate=False)
    out = list(engine.generate(list(b"say ok!"), 32))
    assert bytes(out) == b"ok!"
    assert batches[1:] == [4]  # after the prompt: the first token, then "k", "!" and the end
    assert engine.last_stats.drafted == 3 and engine.last_stats.accepted == 3


def test_failed_probes_get_rarer_and_a_success_restores_them():
    c = controller_with_costs({1: 1.0, 2: 2.0, 9: 9.0})
    probes = []
    for step in range(32 + 64 + 128):
        if c.choose(Kind.parse("model"), 4) == 1:
            probes.append(step)
            c.record_nothing(Kind.parse("model"))  # asked, and it had nothing worth drafting
    assert probes == [31, 31 + 64, 31 + 64 + 128]
    c._probing.add(Kind.parse("model"))
    c.record(Kind.parse("model"), 1, 1, 2, 2.0)  # a probe that was accepted
    assert c._interval[Kind.parse("model")] == c.explore_every


def model_cost(probe_seconds: float, step_seconds: float = 0.0) -> ModelCost:
    """A model drafter's measured costs: a catch-up after a pause, and a step's."""
    cost = ModelCost(Kind.parse("model"), backend=None, window=64)
    cost.probe_s = probe_seconds
    cost.syncs, cost.sync_s = (1, step_seconds) if step_seconds else (0, 0.0)
    return cost


def test_a_dear_probe_drafts_a_burst_no_more_often_than_its_share_of_decoding_allows():
    """A declined model drafter must catch up before a probe: when that costs two target
    steps and each of its drafts at worst one more (a rejected row), a burst of
    `PROBE_BURST` drafts costs 10 steps, and at 2% of the decoding time comes every 500."""
    c = controller_with_costs({1: 1.0, 2: 2.0, 9: 9.0})
    cost = model_cost(probe_seconds=2.0)
    assert c.probe_share == 0.02 and PROBE_BURST == 8
    drafted = []
    for step in range(1100):
        if c.draft_length(cost, 4) >= 1:
            drafted.append(step)
            c.record_nothing(cost.kind)
    assert drafted == [*range(499, 507), *range(999, 1007)]


def test_a_model_drafter_the_prior_declines_drafts_on_its_own_once_a_burst_shows_it_pays():
    """Two tokens cost 1.2x one and the drafter 0.4 of a token a step: at the prior's 50%
    acceptance a draft would lose. A probe's burst accepted throughout teaches otherwise."""
    c = controller_with_costs({1: 1.0, 2: 1.2, 9: 3.0})
    cost = model_cost(probe_seconds=1.0, step_seconds=0.4)
    steps = [c.draft_length(cost, 1) for _ in range(400)]
    first = steps.index(1)
    assert steps[first:first + PROBE_BURST + 1] == [1] * PROBE_BURST + [0]
    for _ in range(PROBE_BURST):
        c.record(cost.kind, 1, 1, 2, 1.2)
    assert c.choose(cost.kind, 1, draft_seconds=0.4, explore=False) == 1


def test_a_size_decoding_ran_a_few_times_joins_the_curve_at_their_median():
    cost = CostModel(max_n=5)
    cost.observe(1, 0.010)
    assert not cost.calibrated  # one timing of one token is no measurement yet
    for t in (0.011, 0.050):  # the second a stall
        cost.observe(1, t)
    assert cost.calibrated and abs(cost.predict(1) - 0.011) < 1e-9
    for _ in range(LEARN_AFTER):
        cost.observe(3, 0.016)
    assert set(cost.measured) == {1, 3}


def test_a_size_never_measured_is_priced_pessimistically_between_the_measured_ones():
    """Before decoding ran a size, it costs what the prior allows from the measured size
    below it, but never more than the measured size above it: a draft is chosen by a
    price no machine measured here undercuts, and a loss while learning is unlikely."""
    cost = CostModel(max_n=9)
    cost.set_timed({1: 0.010, 6: 0.025})
    c = cost.costs()
    assert abs(c[2] - 0.010 * prior_units(2)) < 1e-9  # 1.9x one token
    assert c[5] == 0.025  # the prior from 1 would say more: 6 tokens cost 0.025
    assert abs(c[8] - (0.025 + 0.010 * (prior_units(8) - prior_units(6)))) < 1e-9
    assert all(c[n] <= c[n + 1] for n in range(1, 9))


def test_nothing_is_drafted_before_one_tokens_cost_is_known():
    c = DraftController(max_k=4)
    for _ in range(30):
        c.acceptance.record(Kind.parse("lookup/n4"), 4, 4)
    assert c.choose(Kind.parse("lookup/n4"), 4) == 0
    for _ in range(LEARN_AFTER):
        c.cost.observe(1, 0.010)
    assert c.choose(Kind.parse("lookup/n4"), 4) == 4  # nearly always accepted: pays even at the prior's prices


EPYC_UNITS = [0, 1.0, 1.55, 2.14, 2.82, 3.8, 4.3, 4.5, 6.6, 7.4, 7.4]  # a 2-core EPYC's batch costs


def _decode(c: DraftController, key: Kind, accept: float, steps: int, seed: int = 0) -> tuple[list[int], float]:
    """Draft lengths the controller chose over `steps` steps of a kind accepted with
    probability `accept` per token, and the speed against plain decoding, on a machine
    whose batch of n costs EPYC_UNITS[n] tokens."""
    rng, chosen, tokens, units = np.random.default_rng(seed), [], 0, 0.0
    for _ in range(steps):
        k = c.choose(key, 8)
        n = next((i for i in range(k) if rng.random() > accept), k)
        c.record(key, k, n, k + 1, 0.080 * EPYC_UNITS[k + 1])
        chosen.append(k)
        tokens, units = tokens + n + 1, units + EPYC_UNITS[k + 1]
    return chosen, tokens / units


def _measured_up_to_two() -> DraftController:
    c = DraftController(max_k=8)
    c.cost.set_timed({1: 0.080, 2: 0.080 * EPYC_UNITS[2]})
    return c


def test_sizes_never_drafted_are_tried_where_they_might_pay_so_long_drafts_stay_reachable():
    """Only one and two tokens measured: priced by the prior, a 3-token batch would never
    be drafted, so never measured. Where a kind verifies nearly everything, the next
    size is tried until it joins the curve, then drafted as far as its real cost pays."""
    c = _measured_up_to_two()
    chosen, speed = _decode(c, Kind.parse("lookup/n8+/c"), 0.97, 200)
    assert c.cost.knows(3) and max(chosen[-100:]) >= 2
    assert speed > 1.97 / EPYC_UNITS[2]  # more than one-token drafts could give


def test_a_measured_kernel_step_does_not_keep_longer_drafts_out_of_reach():
    """llama.cpp switches kernels at some batch sizes: here 8 tokens cost a step more than 7,
    and 16 hardly more than 8. Priced up from the step, a size past it would never be tried;
    priced also from one token, the longer sizes are tried where copies are nearly always
    accepted, and join the curve."""
    units = {1: 1.0, 2: 1.5, 3: 2.0, 4: 2.5, 5: 3.0, 6: 3.4, 7: 3.9, 8: 6.5}
    c = DraftController(max_k=16)
    c.cost.set_timed({n: 0.080 * u for n, u in units.items()})
    optimistic = c.cost.optimistic_costs()
    assert optimistic[17] == pytest.approx(0.080 * (1 + 16 * OPTIMISTIC_ROW))
    assert optimistic[8] == pytest.approx(0.080 * 6.5)  # a measured size is what it measured
    rng = np.random.default_rng(0)
    for _ in range(300):
        k = c.choose(Kind.parse("lookup/n8+/c"), 16)
        n = next((i for i in range(k) if rng.random() > 0.98), k)
        c.record(Kind.parse("lookup/n8+/c"), k, n, k + 1, 0.080 * (units.get(k + 1) or 6.5 + 0.1 * (k - 7)))
    assert any(c.cost.knows(n) for n in range(9, 18))


def test_trying_unmeasured_sizes_costs_novel_text_nothing():
    c = _measured_up_to_two()
    chosen, speed = _decode(c, Kind.parse("lookup/n1"), 0.4, 500)
    assert speed >= 0.99 and chosen.count(2) <= 3


def test_a_drifted_curve_keeps_what_decoding_measured_and_learns_the_rest_again():
    """A curve timed under a passing load (here: ten seconds a token) is not trusted once
    decoding measures the sizes it uses far from it: they keep decoding's figures, the
    rest are priced by the prior until decoding runs them."""
    cost = CostModel(max_n=5)
    cost.set_timed({n: 10.0 + n for n in range(1, 6)})
    for _ in range(8):
        cost.observe(1, 0.010)
        cost.observe(3, 0.016)
    assert cost.drifted()
    cost.relearn()
    assert not cost.drifted()
    assert set(cost.measured) == {1, 3}
    assert abs(cost.measured[3] - 0.016) < 0.002 and abs(cost.measured[1] - 0.010) < 0.002


def test_a_generation_times_nothing_before_its_first_token_and_keeps_what_it_learned(tmp_path, monkeypatch):
    """With no curve on disk the first answer starts at once: the engine learns the batch
    costs from the batches decoding runs, and keeps them for the next process."""
    import tiny_gguf

    from edgespec.drafters import make_drafter
    from edgespec.runtimes.llamacpp import LlamaCppBackend
    from edgespec.speculative import calibration
    from edgespec.speculative.engine import Engine

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    monkeypatch.setattr(Engine, "calibrate", lambda *a, **k: pytest.fail("a generation timed the curve"))
    with LlamaCppBackend(tiny_gguf.write(tmp_path / "tiny.gguf"), n_ctx=512, n_threads=1) as b:
        controller = DraftController(max_k=4)
        engine = Engine(b, make_drafter("lookup", b.n_vocab, controller), controller=controller)
        prompt = b.tokenizer.encode("the the the the the the the the")
        list(engine.generate(prompt, 200))
        st = engine.last_stats
        assert st.first_token_s is not None and st.prefill_s <= st.first_token_s <= st.total_s
        kept = CostModel(max_n=5)
        assert calibration.load(b.cost_key(), kept)
        assert kept.measured.keys() == controller.cost.measured.keys() and 1 in kept.measured


def test_a_stale_curve_on_disk_is_relearned_from_decoding_not_timed(tmp_path, monkeypatch):
    import tiny_gguf

    from edgespec.drafters import make_drafter
    from edgespec.runtimes.llamacpp import LlamaCppBackend
    from edgespec.speculative import calibration
    from edgespec.speculative.engine import Engine

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    monkeypatch.setattr(Engine, "calibrate", lambda *a, **k: pytest.fail("a generation timed the curve"))
    with LlamaCppBackend(tiny_gguf.write(tmp_path / "tiny.gguf"), n_ctx=256, n_threads=1) as b:
        stale = CostModel(max_n=5)
        stale.set_timed({n: 10.0 + n for n in range(1, 6)})
        calibration.save(b.cost_key(), stale)
        controller = DraftController(max_k=4)
        engine = Engine(b, make_drafter("lookup", b.n_vocab, controller), controller=controller)
        prompt = b.tokenizer.encode("the the the the the the the the")
        list(engine.generate(prompt, 48))
        kept = CostModel(max_n=5)
        assert calibration.load(b.cost_key(), kept)
        assert max(kept.measured.values()) < 1.0  # a tiny model's milliseconds, not the stale seconds


def test_a_curve_that_decoding_confirms_is_not_timed_again():
    cost = CostModel(max_n=5)
    cost.set_timed({n: 0.010 * (1 + 0.1 * n) for n in range(1, 6)})
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
        c.record(Kind.parse("lookup/n8+"), 1, 1, 2, 1.2)
    assert c.choose(Kind.parse("lookup/n8+"), 1) == 1
    c.record(Kind.parse("lookup/n8+"), 1, 1, 2, 12.0)  # ten times what it costs
    assert c.choose(Kind.parse("lookup/n8+"), 1) == 1
    costs = c.cost.costs()
    assert costs[2] / costs[1] < 1.3


def test_a_machine_slower_than_when_it_was_timed_keeps_the_ratios_between_batch_sizes():
    """Decoding that only ever verifies 4 tokens still learns what one token costs now:
    every size moves with the machine's speed, so the ratios that draft lengths are
    chosen by stay the timed ones."""
    cost = CostModel(max_n=5)
    cost.set_timed({n: 0.010 * (1 + 0.5 * (n - 1)) for n in range(1, 6)})
    for _ in range(40):
        cost.observe(4, 2 * 0.025)  # everything is twice as slow as when timed
    c = cost.costs()
    assert abs(c[4] - 0.050) < 0.003
    assert abs(c[1] - 0.020) < 0.002  # never observed, yet twice the timed cost
    assert abs(c[4] / c[1] - 2.5) < 0.1


def test_a_curve_cached_in_the_old_format_is_not_loaded(tmp_path, monkeypatch):
    """Curves written before the shared speed factor mixed timings from different
    moments: they are not loaded, so the next generation learns every size again."""
    import json

    from edgespec.speculative import calibration

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

    from edgespec.speculative import calibration

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
        earlier.record(Kind.parse("lookup/n4"), 2, 2, 3, 2.2)
    new = controller_with_costs(costs)
    assert new.choose(Kind.parse("lookup/n4"), 2) == 0
    new.acceptance.seed(earlier.acceptance.take_counts())
    assert new.choose(Kind.parse("lookup/n4"), 2) == 2
    for _ in range(5):  # this run's own evidence leads within a few steps
        new.record(Kind.parse("lookup/n4"), 2, 0, 3, 2.2)
    assert new.choose(Kind.parse("lookup/n4"), 2) == 0
    assert earlier.acceptance.take_counts() == {}  # counted once


def test_what_one_prompt_taught_a_kind_joins_its_long_run_rate_and_the_next_prompt_leads():
    """In an edit a 4-token match copied the file for long runs; in the summary asked next,
    the same kind's copies are wrong from their first token. Carried over as recent
    evidence, the edit would keep the summary drafting for ~20 steps; as part of the
    long-run rate (a prior of two steps), it gives way to the summary's first rejections."""
    c = controller_with_costs({1: 1.0, 2: 1.5, 3: 1.8, 9: 5.0})
    key = Kind("lookup", ("n4-7", "c", "p"))
    c.acceptance.new_context()  # the edit
    for _ in range(30):
        c.record(key, 8, 8, 9, 5.0)
    assert c.choose(key, 8) == 8
    c.acceptance.new_context()  # the summary
    assert c.choose(key, 8) == 8  # the long-run rate: copies run long
    for _ in range(3):
        c.record(key, 8, 0, 9, 5.0)
    assert c.choose(key, 8, explore=False) == 0


def test_counts_that_are_not_the_models_own_are_not_seeded():
    c = DraftController(max_k=4)
    c.acceptance.seed({"a": [[2.0], [1.0]], "b": "x", "c": [[1.0, 1.0], [1.0]], "d": [[float("nan")], [1.0]],
                       "e": [[1.0], [2.0], [3.0]]})
    assert all(list(c.acceptance.rates(Kind(k))) == [0.5] * 4 for k in "abcde")


def test_kinds_are_kept_per_target_and_a_model_drafters_per_drafter_file(tmp_path, monkeypatch):
    """A new process on the same target starts from what greedy runs counted of each kind;
    a model drafter's kind ("model") is carried only to the same drafter model file."""
    from types import SimpleNamespace

    from edgespec.speculative import calibration

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    target, small, other = (tmp_path / n for n in ("target.gguf", "small.gguf", "other.gguf"))
    for p in (target, small, other):
        p.write_bytes(b"GGUF")
    drafting = [SimpleNamespace(kind=Kind("model"), backend=SimpleNamespace(path=small))]
    calibration.save_kinds(target, drafting, {"lookup/n2": [[1.0], [2.0]], "model": [[3.0], [4.0]]})
    calibration.save_kinds(target, drafting, {"lookup/n2": [[1.0, 1.0], [1.0, 1.0]]})  # runs add up
    assert calibration.load_kinds(target, drafting) == {"lookup/n2": [[2.0, 1.0], [3.0, 1.0]], "model": [[3.0], [4.0]]}
    with_other = [SimpleNamespace(kind=Kind("model"), backend=SimpleNamespace(path=other))]
    assert calibration.load_kinds(target, with_other) == {"lookup/n2": [[2.0, 1.0], [3.0, 1.0]]}
    assert calibration.load_kinds(small, drafting) == {}  # another target counted nothing yet
    calibration.save_kinds(target, with_other, {"model": [[0.0], [5.0]]})  # the first drafter's stays
    assert calibration.load_kinds(target, drafting)["model"] == [[3.0], [4.0]]
    assert calibration.load_kinds(target, with_other)["model"] == [[0.0], [5.0]]
    calibration.save_kinds(target, drafting, {"lookup/n2": [[5000.0], [5000.0]]})
    assert calibration.load_kinds(target, drafting)["lookup/n2"] == [[2501.0, 0.5], [2501.5, 0.5]]  # halved


def test_a_new_engine_on_the_same_model_starts_from_what_earlier_runs_counted(tmp_path, monkeypatch):
    import tiny_gguf

    from edgespec.drafters import make_drafter
    from edgespec.runtimes.llamacpp import LlamaCppBackend
    from edgespec.speculative import calibration
    from edgespec.speculative.engine import Engine

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
        for kind in map(Kind.parse, counted):
            assert list(second.acceptance.rates(kind)) == list(expected.rates(kind))
        assert any(list(expected.rates(Kind.parse(kind))) != [0.5] * 4 for kind in counted)  # not the flat prior


def test_a_drafter_whose_batches_run_dearer_than_the_curve_says_stops_where_it_pays_narrowly():
    """The curve says 2 tokens cost 1.5x one; decoding finds them at 1.9x (a curve timed at a
    quick moment). A one-token draft accepted 65% of the time then loses (1.65 / 1.9), and
    the family stops drafting it; a long draft that is nearly always accepted still pays."""
    c = controller_with_costs({1: 1.0, 2: 1.5, 3: 1.8, 9: 4.0})
    for _ in range(40):
        c.acceptance.record(Kind.parse("lookup/n2"), 1, 1)
    for i in range(40):
        c.acceptance.record(Kind.parse("lookup/n2"), 1, int(i % 20 < 13))  # 65% of the time, lately
        c.acceptance.record(Kind.parse("lookup/n8+"), 8, 8)
    assert c.choose(Kind.parse("lookup/n2"), 1) == 1  # as predicted: 1.65 tokens for 1.5
    c.record(Kind.parse("recycle"), 0, 0, 1, 1.0)  # a plain step: one token costs what the curve says
    c.record(Kind.parse("lookup/n2"), 1, 1, 2, 1.9)
    assert c.choose(Kind.parse("lookup/n2"), 1) == 0  # one dear batch is enough, long before the curve learns it
    assert c.choose(Kind.parse("lookup/n8+"), 8) == 8
    for i in range(30):
        c.record(Kind.parse("recycle"), 0, 0, 1, 1.0)
        c.record(Kind.parse("lookup/n2"), 1, int(i % 20 < 13), 2, 1.9)
    assert c.realization(Kind.parse("lookup/n2")) < 0.95 and c.choose(Kind.parse("lookup/n2"), 1) == 0
    for _ in range(200):  # drafting nothing for a while: the shortfall fades and it is tried again
        c.record(Kind.parse("recycle"), 0, 0, 1, 1.0)
    assert c.realization(Kind.parse("lookup/n2")) > 0.97
