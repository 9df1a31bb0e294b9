"""Forced rows (`edgespec bench --forced`): a drafter verified at a fixed length every step,
its acceptance and cost measured, and the speed-up that gives at the run's own batch costs."""

from pathlib import Path

import pytest

from edgespec.bench.common import Run, load_prompts
from edgespec.bench.forced import label, parse_lengths, summary
from edgespec.errors import EdgespecError
from helpers import assert_one_line_error, bench_rows, edgespec

CURVE = {1: 0.030, 2: 0.036, 3: 0.042}  # seconds by batch size: a second row costs 0.2 of a token


def test_a_drafter_accepted_half_the_time_at_a_fifth_of_a_token_gives_what_the_curve_allows():
    """One token drafted each step, accepted in half of 100 steps, the drafter model 6 ms a
    step: 1.5 tokens a step for 36 + 6 ms, against 30 ms a token plain."""
    runs = [Run(list(range(151)), 4.2, drafted=100, accepted=50, steps=100, drafter_model_s=0.6)]
    s = summary(runs, CURVE)
    assert s["tokens_per_step"] == 1.5 and s["drafted_per_step"] == 1.0
    assert s["drafter_ms_per_step"] == pytest.approx(6.0) and s["drafter_ms_per_token"] == pytest.approx(6.0)
    assert s["projected_x_plain"] == pytest.approx(1.5 * 0.030 / 0.042, abs=1e-3)


def test_steps_where_an_unsure_drafter_proposed_nothing_still_pay_for_its_model():
    """A model drafter stops where it is unsure: half the steps verify one token, half none,
    and every step paid the drafter's evaluation."""
    runs = [Run(list(range(121)), 4.0, drafted=50, accepted=20, steps=100, drafter_model_s=0.6)]
    s = summary(runs, CURVE)
    assert s["drafted_per_step"] == 0.5 and s["drafter_ms_per_token"] == pytest.approx(12.0)
    assert s["projected_x_plain"] == pytest.approx(1.2 * 0.030 / (0.033 + 0.006), abs=1e-3)
    assert s["projected_x_plain"] < 1  # drafting that costs more than it gains shows as a loss


def test_forced_lengths_are_whole_numbers_of_at_least_one():
    assert parse_lengths("4,1,2,2") == [1, 2, 4]
    assert parse_lengths(None) == []
    for bad in ("0", "two", ","):
        with pytest.raises(EdgespecError):
            parse_lengths(bad)
    assert label("smollm2-135m", 2) == "forced2:smollm2-135m"


def test_a_bench_can_take_one_category_of_a_shipped_set():
    chats = load_prompts(Path("all"), categories=["chat"])
    assert chats and {p["category"] for p in chats} == {"chat"}
    assert_one_line_error(edgespec("bench", "--prompts", "all", "--category", "poetry", "--peers", "none"),
                          "holds no prompts of category poetry")


def test_forced_rows_measure_edgespecs_drafters_alone():
    assert_one_line_error(edgespec("bench", "-m", "smollm2-135m", "--drafters", "lookup", "--forced", "2"),
                          "--peers none")


@pytest.mark.real_model
def test_bench_forces_each_drafter_to_each_length_and_projects_its_speed_up(smollm2_path, tmp_path):
    r, rows = bench_rows(tmp_path, "-m", smollm2_path, "--drafters", "lookup", "--forced", "1,3", "--peers", "none",
                         "-n", "24", "--category", "chat", "--limit", "1")
    assert {"plain", "forced1:lookup", "forced3:lookup"} <= set(rows) and "lookup" not in rows
    assert "replay:lookup" not in rows  # a replay is the adaptive drafter's: not what was forced
    one, three = rows["forced1:lookup"]["forced"], rows["forced3:lookup"]["forced"]
    assert 0 < one["drafted_per_step"] <= 1 and 0 < three["drafted_per_step"] <= 3
    assert len(rows["forced1:lookup"]["acceptance_by_position"]) == 1
    assert len(rows["forced3:lookup"]["acceptance_by_position"]) <= 3
    assert one["projected_x_plain"] > 0 and one["drafter_ms_per_step"] == 0  # lookup runs no model
    assert "forced drafting (measurements, not what auto does)" in r.stdout
