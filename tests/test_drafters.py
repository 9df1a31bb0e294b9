"""Model-free drafters: what each proposes, and what it learns."""

import numpy as np

from edgespec.drafters import (AutoDrafter, NGramCacheDrafter, PromptLookupDrafter, TokenRecyclingDrafter,
                               make_drafter)
from edgespec.speculative.controller import DraftController
from edgespec.speculative.drafter import Draft, Drafter, Kind, ModelCost
from edgespec.speculative.verifier import SamplingParams


def test_prompt_lookup_continues_the_longest_earlier_match():
    d = PromptLookupDrafter(max_ngram=4)
    # "1 2 3 4 5" occurred; "9 3 4 7" too; the history ends in "2 3 4": the longer match wins
    history = [1, 2, 3, 4, 5, 6, 9, 3, 4, 7, 8, 0, 2, 3, 4]
    d.begin(history)
    draft = d.propose(history, 3)
    assert draft.tokens == [5, 6, 9]
    assert draft.kind == Kind("lookup", ("n3", "p"))  # copied from the prompt


def test_prompt_lookup_keeps_copying_the_source_it_was_copying_and_marks_ambiguous_matches():
    d = PromptLookupDrafter(max_ngram=2)
    source, echo = [9, 10, 11, 12, 13, 14, 15], [11, 12, 99]  # the echo quotes the source, then differs
    history = source + [20] + echo + [30, 9, 10]
    d.begin(history)
    first = d.propose(history, 3)
    assert (first.tokens, str(first.kind)) == ([11, 12, 13], "lookup/n2/p")  # "9 10" occurs in the source only
    history += [11, 12]  # the output copied the source
    d.begin(history)
    # "11 12" occurred last in the echo (then 99), but the copy goes on in the source;
    # the match was followed by two different tokens (/a) and continues the last one (/c)
    second = d.propose(history, 2)
    assert (second.tokens, str(second.kind)) == ([13, 14], "lookup/n2/a/c/p")
    assert str(d.propose(history, 2).kind) == "lookup/n2/a/c/p"  # asking again at the same point says the same


def test_prompt_lookup_copies_the_prompt_rather_than_a_phrase_the_answer_repeated():
    d = PromptLookupDrafter(max_ngram=2)
    prompt = [1, 5, 6, 7, 8, 2]  # "5 6" goes on "7 8" in the code given
    d.begin(prompt)
    history = prompt + [5, 6, 9, 3, 5, 6]  # the answer wrote "5 6 9" once, and now "5 6" again
    draft = d.propose(history, 2)
    assert (draft.tokens, str(draft.kind)) == ([7, 8], "lookup/n2/a/p")
    history += [7, 3, 9, 4, 3, 9]  # "3 9" occurs in the answer only
    assert (d.propose(history, 1).tokens, str(d.propose(history, 1).kind)) == ([4], "lookup/n2")


def test_prompt_lookup_stops_a_copy_where_this_prompts_copies_kept_breaking():
    DEF, OPEN, CLOSE, COLON, NL, HINT, INT = 1, 2, 3, 4, 5, 31, 30
    f, g, h, x, y, z = 10, 11, 12, 20, 21, 22
    d = PromptLookupDrafter()
    prompt = [DEF, f, OPEN, x, CLOSE, COLON, NL, DEF, g, OPEN, y, CLOSE, COLON, NL, DEF, h, OPEN, z, CLOSE, COLON, NL]
    d.begin(prompt)
    history = prompt + [DEF, f, OPEN, x]
    assert d.propose(history, 3).tokens == [CLOSE, COLON, NL]
    history += [HINT, INT, CLOSE, COLON, NL, DEF, g, OPEN, y]  # the edit adds a type hint: the copy broke at ")"
    assert d.propose(history, 3).tokens == [CLOSE, COLON, NL]  # once is no rule
    history += [HINT, INT, CLOSE, COLON, NL, DEF, h]  # and again
    assert d.propose(history, 5).tokens == [OPEN, z]  # the copy now stops before ")"


def test_prompt_lookup_indexes_new_tokens_incrementally():
    d = PromptLookupDrafter()
    history = [10, 11, 12, 13]
    d.begin(history)
    assert d.propose(history, 2).tokens == []  # nothing repeats yet
    history += [10, 11]  # the output starts repeating the prompt
    assert d.propose(history, 2).tokens == [12, 13]


def test_prompt_lookup_rebuilds_when_a_new_prompt_diverges():
    d = PromptLookupDrafter()
    d.begin([1, 2, 3, 1, 2])
    assert d.propose([1, 2, 3, 1, 2], 1).tokens == [3]
    d.begin([7, 8, 9, 7])  # a different conversation: old positions must not leak
    assert d.propose([7, 8, 9, 7], 2).tokens == [8, 9]


def test_ngram_cache_drafts_the_dominant_continuation_and_keeps_it_across_turns():
    d = NGramCacheDrafter(max_ngram=2, min_count=2)
    turn1 = [5, 6, 7, 1, 5, 6, 7, 2, 5, 6, 7]
    d.begin(turn1)
    assert d.propose(turn1, 2).tokens == []  # after "6 7": 1 once, 2 once -> no dominant one
    turn2 = turn1 + [3, 4, 5, 6]  # the next turn extends the conversation
    d.begin(turn2)
    assert d.propose(turn2, 1).tokens == [7]  # "5 6" -> 7 every time
    # a new turn that repeats the old history does not count it twice
    assert d._counts[(5, 6)][7] == 3
    d.begin(turn2 + [9])
    assert dict(d._counts[(5, 6)]) == {7: 3, 9: 1}


def test_ngram_cache_stays_within_its_bound_over_a_long_session_and_keeps_what_recurs():
    rng = np.random.default_rng(0)
    d = NGramCacheDrafter(max_ngram=4, max_bytes=200_000)
    phrase = [11, 12, 13, 14, 15]  # a phrase the session keeps repeating
    history: list[int] = []
    for _ in range(300):  # 300 turns of fresh random text around the phrase
        history = [*rng.integers(100, 50_000, size=40).tolist(), *phrase]  # the context was trimmed
        d.begin(history)
        assert d.memory() <= 200_000
    assert d.memory() >= 1_000  # pruned to half the bound, not emptied
    assert d.propose([*history, 11, 12], 3).tokens == [13, 14, 15]


def test_token_recycling_walks_the_best_token_of_each_verification_row():
    vocab = 50
    d = TokenRecyclingDrafter(vocab)
    d.begin([1], (SamplingParams(temperature=0.8), np.random.default_rng(0)))
    logits = np.zeros((2, vocab), dtype=np.float32)
    logits[0, 7] = 3.0  # after token 4 the target liked 7 best
    logits[1, 9] = 5.0  # after token 7: 9
    d.observe([1, 4], [4, 7], logits, next_token=12)  # sampling drew 12 after 7: not its best
    assert d.propose([1, 4], 3).tokens == [7, 9]


def test_token_recycling_in_greedy_decoding_learns_the_tokens_the_target_chose_without_reading_logits():
    d = TokenRecyclingDrafter(50)
    d.begin([1])  # greedy
    unread = np.full((3, 50), np.nan, dtype=np.float32)  # the verdict already names each row's best
    d.observe([1, 4], [4, 7, 9], unread, next_token=11)
    assert d.propose([1, 4], 5).tokens == [7, 9, 11]


def test_token_recycling_keeps_one_successor_per_token_about_a_megabyte_for_large_vocabularies():
    for vocab in (49_152, 151_936, 262_144):
        assert TokenRecyclingDrafter(vocab).memory() == 4 * vocab


class Fixed(Drafter):
    """Always proposes the same tokens; counts how often it was asked. With `seconds_per_token`
    it is a model drafter, paying that for each token it drafts."""

    def __init__(self, tokens, kind, seconds_per_token=None):
        self.draft = Draft(tokens, Kind(kind))
        self.asked = 0
        if seconds_per_token is not None:
            self.cost = ModelCost(Kind(kind), backend=None)
            self.cost.steps, self.cost.step_s = 1, seconds_per_token

    def propose(self, history, k):
        self.asked += 1
        return self.draft.truncated(k)


def trained_controller(accepts):
    """Verification of n tokens costs 1 + 0.1 (n - 1); each key accepted as given."""
    c = DraftController(max_k=8)
    c.cost.set_timed({n: 1.0 + 0.1 * (n - 1) for n in range(1, 10)})
    for key, (k, n) in accepts.items():
        for _ in range(30):
            c.record(Kind(key), k, n, k + 1, 1.0 + 0.1 * k)
    return c


def test_auto_takes_the_proposal_with_the_best_predicted_gain():
    c = trained_controller({"a": (1, 0), "b": (2, 2)})
    auto = AutoDrafter([Fixed([1], "a"), Fixed([2, 3], "b")], c)
    assert auto.propose([0], 4).tokens == [2, 3]


def test_the_hybrid_asks_its_model_drafter_only_when_that_pays():
    # the model is right half the time and costs 0.3 of a target step per token;
    # copying ("b") is always right and free: the model is not asked
    c = trained_controller({"b": (4, 4), "m": (4, 1)})
    model = Fixed([7, 8, 9, 10], "m", seconds_per_token=0.3)
    auto = AutoDrafter([Fixed([2, 3, 4, 5], "b"), model], c)
    for _ in range(10):
        assert auto.propose([0], 4).tokens == [2, 3, 4, 5]
    assert model.asked == 0
    # where nothing can be copied, a model that is usually right and cheap drafts
    c = trained_controller({"m": (4, 4)})
    model = Fixed([7, 8, 9, 10], "m", seconds_per_token=0.05)
    auto = AutoDrafter([Fixed([], "b"), model], c)
    assert auto.propose([0], 4).tokens == [7, 8, 9, 10] and model.asked == 1
    # a model too slow to pay is not asked, but for a rare probe
    model.cost.step_s = 5.0
    taken = [auto.propose([0], 4).tokens for _ in range(64)]
    assert taken.count([]) >= 60 and model.asked <= 1 + 64 // c.explore_every + 1


def test_the_hybrids_probe_of_a_declined_model_is_a_burst_verified_over_free_proposals():
    """A probe pays the model's catch-up after its pause: it drafts `PROBE_BURST` steps in a
    row, taken over what copying offers, so what it teaches is worth that catch-up."""
    from edgespec.speculative.controller import PROBE_BURST

    c = trained_controller({"b": (4, 4), "m": (4, 0)})  # the model's drafts were all rejected
    model = Fixed([7, 8, 9, 10], "m", seconds_per_token=0.3)
    model.cost = ModelCost(Kind("m"), backend=None, window=64)  # a windowed drafter: probes pay a catch-up
    model.cost.steps, model.cost.step_s, model.cost.probe_s = 1, 0.3, 0.5
    auto = AutoDrafter([Fixed([2, 3, 4, 5], "b"), model], c)
    taken = [auto.propose([0], 4).tokens for _ in range(200)]
    first = taken.index([7])
    assert taken[first:first + PROBE_BURST] == [[7]] * PROBE_BURST
    assert taken.count([7]) == model.asked == PROBE_BURST  # and none besides, at 2% of the decoding time


def test_unknown_drafter_names_are_refused():
    import pytest

    from edgespec.errors import DrafterError

    with pytest.raises(DrafterError, match="unknown drafter 'magic'"):
        make_drafter("magic", 100, DraftController())
