"""The batch-cost curve a bench prices its oracle and replay rows at: the run's, not one moment's."""

from __future__ import annotations

import io
import os
import time
from collections import Counter
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from edgespec.bench.common import Run
from edgespec.bench.curves import BatchCurves, one_token_on_off, one_token_speed
from edgespec.bench.interleave import balanced_orders, interleave
from edgespec.bench.methods import edgespec_method
from edgespec.runtimes.llamacpp import SMALL_BATCH_SWITCH
from edgespec.speculative.verifier import SamplingParams


class Timings:
    """An engine whose successive curve timings are given (seconds by batch size)."""

    def __init__(self, *curves: dict[int, float]) -> None:
        self.curves = iter(curves)

    def time_curve(self) -> dict[int, float]:
        return next(self.curves)


def test_each_batch_size_is_priced_at_the_median_of_its_timings():
    llama = Timings({1: 1.0, 2: 1.7, 3: 2.0}, {1: 1.2, 2: 2.4, 3: 2.6}, {1: 1.1, 2: 2.0, 3: 2.3})
    onnx = Timings({1: 5.0, 2: 5.5}, {1: 4.0, 2: 6.0}, {1: 6.0, 2: 5.0})
    curves = BatchCurves({"": llama, "onnx:": onnx})
    for _ in range(3):
        curves.time()
    assert curves.medians() == {"": {1: 1.1, 2: 2.0, 3: 2.3}, "onnx:": {1: 5.0, 2: 5.5}}


def test_a_size_one_timing_could_not_reach_is_left_to_the_controllers_pricing():
    curves = BatchCurves({"": Timings({1: 1.0, 2: 1.75, 3: 2.25}, {1: 1.0, 2: 1.25})})
    curves.time()
    curves.time()
    assert curves.medians() == {"": {1: 1.0, 2: 1.5}}


def test_the_printed_curve_says_how_many_timings_and_how_far_two_tokens_moved_between_them():
    curves = BatchCurves({"": Timings({1: 1.0, 2: 1.7}, {1: 1.0, 2: 1.9}, {1: 1.0, 2: 1.8}),
                          "onnx-int4:": Timings({1: 2.0, 2: 2.2}, {1: 2.0, 2: 2.2}, {1: 2.0, 2: 2.2})})
    out = io.StringIO()
    for _ in range(3):
        curves.time()
    curves.print(Console(file=out, width=300))
    lines = out.getvalue().splitlines()
    assert lines[0] == ("batch cost timed after each category (3 timings, median per size), in units of one "
                        "token: 1: 1.00, 2: 1.80; 2 tokens 1.70-1.90 across timings")
    assert lines[1].startswith("onnx-int4 batch cost timed after each category (3 timings")


def test_the_curves_are_timed_after_each_categorys_last_prompt_wherever_its_prompts_are():
    seen: list[str] = []

    def method(ids: list[int], max_tokens: int, fmt=None) -> Run:
        seen.append(str(ids[0]))
        return Run([1, 2], 0.1)

    prompts = [("code", [1]), ("chat", [2]), ("code", [3]), ("summarize", [4]), ("chat", [5])]
    interleave({"plain": edgespec_method("plain", method)}, prompts, [None] * len(prompts), 2, SamplingParams(),
               Console(file=io.StringIO()), lambda: seen.append("timed"))
    assert seen == ["1", "2", "3", "timed", "4", "timed", "5", "timed"]


@given(st.integers(min_value=2, max_value=12))
def test_over_its_orders_every_method_runs_right_after_every_other_and_in_every_place_equally_often(n):
    orders = balanced_orders(n)
    follows = Counter((a, b) for order in orders for a, b in zip(order, order[1:]))
    places = Counter((m, place) for order in orders for place, m in enumerate(order))
    assert all(sorted(order) == list(range(n)) for order in orders)
    assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1
    assert len(places) == n * n and len(set(places.values())) == 1


def test_the_bench_runs_each_prompts_methods_in_the_next_balanced_order():
    seen: list[str] = []

    def method(name: str):
        def run(ids: list[int], max_tokens: int, fmt=None) -> Run:
            seen.append(name)
            return Run([1, 2], 0.1)
        return run

    methods = {name: edgespec_method(name, method(name)) for name in ("plain", "lookup", "auto", "peer")}
    interleave(methods, [("code", [i]) for i in range(5)], [None] * 5, 2, SamplingParams(),
               Console(file=io.StringIO()), lambda: None)
    assert [seen[k:k + 4] for k in range(0, 20, 4)] == [
        ["plain", "lookup", "peer", "auto"],
        ["lookup", "auto", "plain", "peer"],
        ["auto", "peer", "lookup", "plain"],
        ["peer", "plain", "auto", "lookup"],
        ["plain", "lookup", "peer", "auto"],  # the orders start again
    ]


def test_a_curve_timed_apart_is_tabled_per_timing_beside_the_prior_it_replaces():
    """`python3 -m edgespec.bench.curves` times the curve after plain decoding of a prompt of
    each category in turn; its table shows every timing, their median and the prior."""
    from edgespec.api import EdgeSpec
    from edgespec.bench.curves import timed_apart
    from edgespec.bench.record import BATCH_CURVES, markdown, record
    from edgespec.runtimes.reference import ReferenceBackend

    llm = EdgeSpec(ReferenceBackend(), drafter="none", max_draft=4)
    prompts = [{"category": "code", "prompt": "def f(x):"}, {"category": "code", "prompt": "class A:"},
               {"category": "chat", "prompt": "Hello there"}]
    rows = timed_apart(llm, prompts, timings=3, max_tokens=8)
    assert [r["after"] for r in rows] == ["code", "chat", "code"]
    assert all(len(r["batch_costs_ms"]) == 5 and min(r["batch_costs_ms"]) > 0 for r in rows)
    table = markdown(record(rows, "reference", "python3 -m edgespec.bench.curves", kind=BATCH_CURVES,
                            prior_units=[1.0, 1.9, 2.7, 3.5, 4.3]))
    assert "| tokens in the batch | timing 1 (code) | timing 2 (chat) | timing 3 (code) | median | prior |" in table
    five = next(line for line in table.splitlines() if line.startswith("| 5 |"))
    assert five.endswith("| 4.30 |")  # the prior, after the three timings and their median


def test_one_tokens_speed_with_the_kernels_on_is_their_paired_times_ratio_with_an_interval():
    drift = [10.0, 20.0, 15.0, 30.0, 12.0, 25.0]   # the machine's speed moving between rounds
    pairs = [[t, t * 1.02] for t in drift]           # off 2% slower in every round
    speed, (lo, hi) = one_token_speed(pairs)
    assert speed == 1.02 and lo == hi == 1.02
    speed, (lo, hi) = one_token_speed([[10.0, 10.5], [20.0, 19.0], [15.0, 15.0]])
    assert lo < speed < hi


class OneTokenBackend:
    """One token takes 1 ms of a clock of its own with the small-batch switch on, 2 ms off; the
    context is kept as found."""

    def __init__(self) -> None:
        self.n_past, self.tokenizer, self.evals, self.now = 7, SimpleNamespace(bos_id=1), [], 0.0

    def clock(self) -> float:
        return self.now

    def eval(self, ids: list[int]) -> None:
        self.evals.append((ids, os.environ.get(SMALL_BATCH_SWITCH)))
        self.n_past += len(ids)
        self.now += 0.002 if os.environ.get(SMALL_BATCH_SWITCH) == "0" else 0.001

    def rollback(self, n_past: int) -> None:
        self.n_past = n_past


def test_one_token_is_timed_with_the_kernels_on_and_off_in_turn_and_the_context_is_left_as_it_was(monkeypatch):
    b = OneTokenBackend()
    monkeypatch.setattr(time, "perf_counter", b.clock)
    assert one_token_on_off(b, 4, seed=0) == [[1.0, 2.0]] * 4
    assert sorted(switch or "on" for _, switch in b.evals) == ["0"] * 4 + ["on"] * 4
    assert all(ids == [1] for ids, _ in b.evals) and b.n_past == 7 and SMALL_BATCH_SWITCH not in os.environ
