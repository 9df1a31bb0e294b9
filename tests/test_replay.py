"""Replaying a drafter on plain decoding's own text, priced at a given cost curve:
every method writes the same text, so what it gains is its own."""

import numpy as np
import pytest

from edgespec.bench.oracle import lookup_oracle_time
from edgespec.bench.replay import replay
from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
from edgespec.speculative.engine import Engine
from prompts import PROMPTS


@pytest.fixture(scope="module")
def recorded():
    """(category, prompt ids, plain greedy output) for the reference model."""
    backend = ReferenceBackend(ReferenceModel(seed=7))
    engine = Engine(backend)
    runs = []
    for p in PROMPTS[:8]:
        engine.reset()
        ids = backend.tokenizer.encode(p)
        runs.append(("any", ids, list(engine.generate(ids, 48))))
    return backend.tokenizer, runs


def test_where_batches_are_cheap_replayed_lookup_gains_at_most_what_the_oracle_does(recorded):
    tokenizer, runs = recorded
    costs = np.array([0.0] + [1.0 + 0.1 * (n - 1) for n in range(1, 18)])  # 16 extra tokens cost 2.6x one
    plain_s, replay_s, drafted, accepted = replay(tokenizer, runs, "lookup", costs, max_draft=16)["all"]
    oracle_s = sum(lookup_oracle_time(ids, out, costs) for _, ids, out in runs)
    assert drafted > accepted > 0
    assert plain_s / replay_s > 1.0  # these outputs repeat their prompts: copying pays
    assert replay_s >= oracle_s * 0.99  # the oracle knows each proposal's fate; the controller learns it


def test_where_a_batch_costs_as_much_as_its_tokens_the_replay_stays_at_plain_speed(recorded):
    """Nothing pays when n tokens cost n times one: the controller declines to draft
    (learning from the declined drafts in hindsight, not from probes), and the replay
    says so."""
    tokenizer, runs = recorded
    costs = np.arange(18, dtype=float)
    plain_s, replay_s, drafted, _ = replay(tokenizer, runs, "lookup", costs, max_draft=16)["all"]
    assert 0.9 < plain_s / replay_s <= 1.05
    assert drafted < sum(len(out) for _, _, out in runs) / 10


def test_a_replay_on_a_machine_that_timed_nothing_learns_the_curve_from_its_own_batches(recorded):
    """With the curve not given, sizes join it as they are verified; where long drafts pay even
    at the cheapest rows, they are tried and learned, so copying pays on a first run too;
    without that trying, no size above one token would ever be measured, so none is drafted."""
    from unittest.mock import patch

    from edgespec.speculative.controller import DraftController

    tokenizer, runs = recorded
    costs = np.array([0.0] + [1.0 + 0.3 * (n - 1) for n in range(1, 18)])
    first = replay(tokenizer, runs, "lookup", costs, max_draft=16, curve_known=False)["all"]
    with patch.object(DraftController, "_size_to_learn", lambda self, *a: 0):
        untried = replay(tokenizer, runs, "lookup", costs, max_draft=16, curve_known=False)["all"]
    assert first[0] / first[1] > 1.0 and first[2] > 0
    assert untried[2] == 0  # every size above one token stays at its pessimistic prior: none is drafted


def test_each_rule_of_lookup_and_the_controller_can_be_taken_out_and_its_worth_tabled(recorded):
    """`python3 -m edgespec.bench.ablations` replays lookup with every rule, then without
    each in turn; its table puts them side by side."""
    from edgespec.bench.ablations import LEARNING_ONLY, RULES, ablate
    from edgespec.bench.record import ABLATIONS, markdown, record

    tokenizer, runs = recorded
    costs = np.array([0.0] + [1.0 + 0.3 * (n - 1) for n in range(1, 18)])
    rows = ablate(tokenizer, runs, costs)
    assert {(r["machine"], r["taken_out"]) for r in rows} == {
        (m, rule) for m in ("first run", "fresh", "rates stored") for rule in ("none", *RULES)
        if m == "first run" or rule not in LEARNING_ONLY}
    row = {(r["machine"], r["taken_out"]): r for r in rows if r["category"] == "all"}
    every = row["fresh", "none"]
    assert every["ratio_to_plain"] > 1.0 and every["accepted"] > 0
    assert row["first run", "none"]["drafted"] != every["drafted"]  # unmeasured sizes priced high, then tried
    assert row["fresh", "hindsight"]["drafted"] != every["drafted"]  # probes instead of learning from the text
    assert row["rates stored", "none"]["drafted"] != every["drafted"]  # the first pass's rates priced the drafts
    table = markdown(record(rows, "reference", "python3 -m edgespec.bench.ablations", kind=ABLATIONS,
                            drafter="lookup", batch_costs_ms=[1000 * c for c in costs[1:]]))
    assert all(f"| {rule} |" in table for rule in RULES)
    assert "2 tokens 1.30x" in table
