"""A hybrid against the best single drafter it mixes, and a method against the best peer:
ratios with the precision the bench's prompts allow, not one aggregate that noise can tip
either way."""

import numpy as np

from edgespec.bench.common import Run
from edgespec.bench.hybrid_compare import against_best_member, against_best_peer, against_plain, members, verdict


def bench_runs(speeds: dict[str, float], prompts: int = 8, noise: float = 0.05, seed: int = 0) -> dict:
    """Each method's runs over the same prompts: 100 tokens at about its speed, a prompt's
    own difficulty shared by every method (what pairing cancels), and timing noise."""
    rng = np.random.default_rng(seed)
    hard = rng.uniform(0.7, 1.3, prompts)
    return {(name, "chat"): [Run(list(range(101)), 100 * hard[i] / (tps * rng.normal(1, noise)))
                             for i in range(prompts)] for name, tps in speeds.items()}


def test_a_hybrids_members_are_the_single_drafters_it_mixes():
    assert members("auto") == ["lookup", "ngram", "recycle"]
    assert members("auto+smollm2-135m") == ["lookup", "ngram", "recycle", "smollm2-135m"]
    assert members("lookup") == []


def test_a_hybrid_as_fast_as_its_best_member_shows_no_difference_within_the_noise():
    """Twenty benches of a hybrid exactly as fast as lookup: the interval covers 1 in most
    of them (90% nominal; a bootstrap over eight prompts runs a little narrow: 16 here),
    and the ratio stays near it."""
    found = [against_best_member(bench_runs({"lookup": 30.0, "ngram": 25.0, "auto+smollm2-135m": 30.0}, seed=s),
                                 ["chat"])["auto+smollm2-135m"]["chat"] for s in range(20)]
    assert all(c["best_member"] == "lookup" and c["prompts"] == 8 for c in found)
    covered = [c for c in found if verdict(c) == "no difference measured"]
    assert len(covered) >= 14 and all(c["interval"][0] < 1.0 < c["interval"][1] for c in covered)
    assert all(abs(c["ratio"] - 1.0) < 0.08 for c in found)


def test_a_hybrid_that_loses_to_its_best_member_is_measured_slower():
    runs = bench_runs({"lookup": 30.0, "auto": 27.0}, prompts=12, noise=0.02)
    c = against_best_member(runs, ["chat"])["auto"]["all"]
    assert c["interval"][1] < 1.0 and verdict(c) == "slower in this run"


def test_a_hybrid_with_none_of_its_members_beside_it_is_not_compared():
    assert against_best_member(bench_runs({"auto": 30.0, "plain": 29.0}), ["chat"]) == {}


def test_a_hybrid_of_a_model_given_by_path_keeps_a_row_apart_from_the_model_alone():
    from edgespec.bench.run import _label

    assert _label("/models/drafter.gguf") == "drafter.gguf"
    assert _label("auto+/models/drafter.gguf") == "auto+drafter.gguf"
    assert members(_label("auto+/models/drafter.gguf"))[-1] == _label("/models/drafter.gguf")
    assert _label("./drafter-q4_0") == "drafter-q4_0"  # a folder beside the user's, as typed


def test_every_drafter_gets_an_interval_over_prompts_around_its_ratio_to_plain():
    """A drafter 3% faster than plain, over twenty benches of eight prompts whose timing moves
    5% each: the interval holds the true ratio in most of them; plain gets none."""
    spreads = [against_plain(bench_runs({"plain": 30.0, "auto": 30.9}, seed=s), ["chat"], lambda name: "plain")
               for s in range(20)]
    assert sum(sp[("auto", "chat")][0] < 1.03 < sp[("auto", "chat")][1] for sp in spreads) >= 14
    assert all(("auto", "all") in sp and ("plain", "chat") not in sp for sp in spreads)


SERVER_TYPES = ["llama-server:ngram-mod", "llama-server:ngram-simple", "llama-server:ngram-map-k"]


def server_plain(name: str) -> str:
    return "llama-server" if name.startswith("llama-server:") else "plain"


def test_against_peer_types_that_draft_nothing_the_best_of_them_is_noise_and_measured_so():
    """Open chat, where no method drafts: every speed-up is 1 and only the timing moves.
    Picked per bench as the best of three, the peer's speed-up looks like a gain and the
    method looks behind it, but the interval covers 1 in most of twenty benches."""
    speeds = {"plain": 30.0, "auto": 30.0, "llama-server": 31.0, **{t: 31.0 for t in SERVER_TYPES}}
    found = [against_best_peer(bench_runs(speeds, seed=s), ["chat"], server_plain, ["auto"], SERVER_TYPES)
             [("auto", "chat")] for s in range(20)]
    assert sum(c["ratio"] < 1.0 for c in found) >= 14  # the pick favours the peer
    assert sum(verdict(c) == "no difference measured" for c in found) >= 14
    assert all(c["best_peer"] in SERVER_TYPES and c["prompts"] == 8 for c in found)


def test_a_method_whose_gain_beats_every_peer_types_is_measured_faster():
    speeds = {"plain": 30.0, "lookup": 36.0, "llama-server": 31.0, "llama-server:ngram-mod": 32.0,
              "llama-server:ngram-simple": 31.0}
    c = against_best_peer(bench_runs(speeds, prompts=12, noise=0.02), ["chat"], server_plain, ["lookup"],
                          SERVER_TYPES)[("lookup", "all")]
    assert c["best_peer"] == "llama-server:ngram-mod" and verdict(c) == "faster in this run"
    assert abs(c["ratio"] - (36 / 30) / (32 / 31)) < 0.05


def test_without_peer_rows_nothing_is_compared_with_a_peer():
    assert against_best_peer(bench_runs({"plain": 30.0, "auto": 31.0}), ["chat"], server_plain, ["auto"],
                             SERVER_TYPES) == {}


def test_one_prompt_has_no_spread_and_shows_no_verdict():
    c = against_best_member(bench_runs({"lookup": 30.0, "auto": 40.0}, prompts=1), ["chat"])["auto"]["chat"]
    assert c["interval"] == [c["ratio"], c["ratio"]] and verdict(c) == "one prompt: no interval"
