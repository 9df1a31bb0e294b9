"""A declined draft is learned from the text that follows it: in greedy decoding a
token is accepted exactly when the target goes on to write it, so what a declined
kind would have verified is known without verifying it."""

import numpy as np

from edgespec.api import EdgeSpec
from edgespec.bench.replay import ReplayBackend
from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
from edgespec.speculative.acceptance import AcceptanceModel
from edgespec.speculative.drafter import Draft, Kind
from edgespec.speculative.hindsight import Hindsight


def test_a_declined_draft_is_learned_once_the_text_shows_where_it_stops_matching():
    acceptance = AcceptanceModel(max_k=8)
    hindsight = Hindsight(acceptance)
    history = [5, 6, 7]
    hindsight.add(Draft([8, 9, 10, 11], Kind("lookup", ("n2",))), start=len(history))
    history += [8, 9]
    hindsight.advance(history)
    assert "lookup/n2" not in acceptance.take_counts()  # two of four matched so far: undecided
    history += [10, 99]
    hindsight.advance(history)
    accepted, tried = acceptance.take_counts()["lookup/n2"]
    # learned as a verification of all four would have been: three accepted, the fourth tested and rejected
    assert accepted[:4] == [1, 1, 1, 0] and tried[:4] == [1, 1, 1, 1]


def test_the_part_of_a_draft_cut_off_before_verifying_is_learned_from_the_text():
    acceptance = AcceptanceModel(max_k=8)
    hindsight = Hindsight(acceptance)
    history = [5, 6, 7]
    # a 6-token proposal of which the controller verified 2 (and recorded their verdict)
    hindsight.add(Draft([8, 9, 10, 11, 12, 13], Kind("lookup", ("n4-7", "c"))), start=len(history), verified=2)
    history += [8, 9, 10, 11, 99]  # the verified two were accepted; the text went on with two more
    hindsight.advance(history)
    accepted, tried = acceptance.take_counts()["lookup/n4-7/c"]
    # positions 3 to 5 are learned (two accepted, the fifth rejected); the first two are the controller's
    assert accepted[:6] == [0, 0, 1, 1, 0, 0] and tried[:6] == [0, 0, 1, 1, 1, 0]


def copying_run():
    """A replayed target (its greedy text fixed) that repeats a 48-token passage of
    its prompt, where a 4-token batch costs 1.6x one token."""
    tokenizer = ReferenceBackend(ReferenceModel(seed=3)).tokenizer
    passage = [int(t) for t in np.random.default_rng(0).permutation(np.arange(10, 200))[:48]]
    prompt = [1, 2, 3, *passage, 4, 5]
    costs = np.array([0.0, 1.0, 1.3, 1.45, 1.6] + [1.6 + 0.2 * n for n in range(1, 14)])
    backend = ReplayBackend(tokenizer, costs, n_ctx=256)
    backend.load([*prompt, *passage])
    return backend, prompt, passage


def test_a_kind_declined_at_first_drafts_once_the_text_copies_its_source():
    backend, prompt, passage = copying_run()
    llm = EdgeSpec(backend, drafter="lookup", max_draft=16)
    llm.engine.controller.acceptance.prior = 0.05  # every kind starts out looking useless
    assert list(llm.engine.generate(prompt, len(passage))) == passage
    # declined at first, the copy's drafts were scored against the copy, then verified:
    # 1.6x plain (probes alone, before hindsight: 1.11x, 6 tokens drafted)
    assert llm.last_stats.accepted >= len(passage) // 3
    assert sum(backend.charged[1:]) < 0.7 * (len(passage) - 1) * backend.costs[1]
