"""Cross-vocabulary drafting: text-level translation between two tokenizers, and
exact losslessness when the drafter speaks another vocabulary than the target."""

import random

import pytest

from helpers import always_draft
from edgespec.drafters import CrossVocabDrafter
from edgespec.drafters.translate import TextView, TranslationCache, check_mappable, retokenize_after, surface
from edgespec.errors import DrafterError
from edgespec.runtimes.reference import ByteTokenizer, ReferenceBackend, ReferenceModel
from edgespec.speculative.engine import Engine
from merged_vocab import MergedVocabBackend, MergeTokenizer
from prompts import PROMPTS

MAX_TOKENS = 48


def test_a_text_view_re_tokenizes_incrementally_as_a_whole_tokenization_would():
    tok = MergeTokenizer()
    rng = random.Random(0)
    for text in PROMPTS:
        data = text.encode("utf-8")
        view = TextView(tok)
        i = 0
        while i < len(data):  # arbitrary chunks, splitting UTF-8 characters too
            n = rng.randint(1, 7)
            view.append(data[i : i + n])
            i += n
            done = data[: view.done]
            assert view.ids == tok.encode(done.decode("utf-8"), add_bos=False)
            assert view.ends[-1:] == ([len(done)] if done else [])
        assert view.pending == 0 and view.done == len(data)


def test_a_partial_utf8_character_waits_until_it_is_complete():
    view = TextView(MergeTokenizer())
    view.append("日".encode()[:2])
    assert view.ids == [] and view.pending == 2
    view.append("日".encode()[2:] + "本".encode())
    assert b"".join(view.tok.token_bytes(t) for t in view.ids) == "日本".encode()
    assert view.pending == 0


def test_text_that_would_merge_with_the_last_token_is_tokenized_on_its_own():
    tok = MergeTokenizer()
    tail = tok.encode("x = t", add_bos=False)  # ends in " t"
    # " t" + "he cat" would re-tokenize as " the cat": the committed " t" cannot change,
    # so the target continues with "he", " ", "c", "at"
    assert retokenize_after(tok, tail, b"he cat") == tok.encode("he cat", add_bos=False)
    # no merge across the boundary: the look-behind is reproduced and dropped
    assert retokenize_after(tok, tok.encode("x = 1", add_bos=False), b" then") == tok.encode(" then", add_bos=False)


def test_the_translation_cache_learns_runs_between_shared_boundaries():
    d_tok, t_tok = MergeTokenizer(), ByteTokenizer()
    text = b"the then"
    d_ids = d_tok.encode(text.decode(), add_bos=False)
    t_ids = t_tok.encode(text.decode(), add_bos=False)
    ends = lambda tok, ids: [sum(len(surface(tok, t)) for t in ids[: i + 1]) for i in range(len(ids))]  # noqa: E731
    cache = TranslationCache()
    cache.learn(d_ids, ends(d_tok, d_ids), t_ids, ends(t_tok, t_ids), aligned=True, start=0)
    the = d_tok.encode("the", add_bos=False)
    assert cache.runs[tuple(the)] == tuple(b"the")
    ids = d_tok.encode("the the", add_bos=False)  # "the", " the": both runs were seen
    out, used = cache.translate(ids)
    assert bytes(out) == b"the the" and used == len(ids)
    assert cache.translate([d_tok.encode("z", add_bos=False)[0]]) == ([], 0)  # never seen: left to re-tokenization


class _UnknownTokenizer(ByteTokenizer):
    """Every character becomes one <unk>: no text can be mapped through it."""

    def encode(self, text, add_bos=True, special=True):
        return [0] * len(text)

    def token_bytes(self, token):
        return b"?"


def test_a_vocabulary_that_cannot_spell_text_is_refused():
    with pytest.raises(DrafterError, match="cannot be mapped"):
        check_mappable(_UnknownTokenizer(), ByteTokenizer())


@pytest.fixture(scope="module")
def model():
    return ReferenceModel(seed=7)


def _lossless_over_prompts(target, make_drafter):
    plain = Engine(target)
    outs = []
    for p in PROMPTS:
        plain.reset()
        outs.append(list(plain.generate(target.tokenizer.encode(p), MAX_TOKENS)))
    controller = always_draft(max_k=8)  # verify every proposal in full
    drafter = make_drafter()
    engine = Engine(target, drafter, controller=controller, calibrate=False)
    drafted = accepted = 0
    for p, expected in zip(PROMPTS, outs):
        engine.reset()
        out = list(engine.generate(target.tokenizer.encode(p), MAX_TOKENS))
        assert out == expected, f"diverged on {p[:30]!r}"
        drafted += engine.last_stats.drafted
        accepted += engine.last_stats.accepted
    assert accepted > 0 and drafted > accepted, (accepted, drafted)  # drafts were both accepted and rejected
    return drafter


def test_a_drafter_with_merged_tokens_drafting_for_a_byte_level_target_is_lossless(model):
    target = ReferenceBackend(model)
    drafter = _lossless_over_prompts(target, lambda: CrossVocabDrafter(MergedVocabBackend(model), target.tokenizer, p_min=0.0))
    assert drafter.cache.hits > 0  # the online cache translated part of the drafts


def test_a_byte_level_drafter_drafting_for_a_target_with_merged_tokens_is_lossless(model):
    target = MergedVocabBackend(model)
    _lossless_over_prompts(target, lambda: CrossVocabDrafter(ReferenceBackend(model), target.tokenizer, p_min=0.0))


def test_chat_turns_keep_the_drafters_view_in_step(model):
    """A second turn extends the first; a new conversation replaces it."""
    target = ReferenceBackend(model)
    tok = target.tokenizer
    drafter = CrossVocabDrafter(MergedVocabBackend(model), tok, p_min=0.0)
    engine = Engine(target, drafter, controller=always_draft(), calibrate=False)
    first = tok.encode(PROMPTS[10])
    out1 = list(engine.generate(first, 24))
    second = first + out1 + tok.encode("<|user|>\nAnd Spain?</s>\n<|assistant|>\n", add_bos=False)
    out2 = list(engine.generate(second, 24))
    assert out2 == list(Engine(ReferenceBackend(model)).generate(second, 24))
    other = tok.encode(PROMPTS[3])
    assert list(engine.generate(other, 24)) == list(Engine(ReferenceBackend(model)).generate(other, 24))
    assert drafter._fed[: len(other)] == other


def test_a_history_longer_than_the_drafters_context_is_drafted_from_its_last_tokens(model):
    """Another vocabulary may spell the same text in more tokens than the drafter holds:
    it then drafts from the history's head and its last tokens, losslessly."""
    target = ReferenceBackend(model)
    small = MergedVocabBackend(model)
    small.n_ctx = 40
    drafter = CrossVocabDrafter(small, target.tokenizer, p_min=0.0)
    prompt = target.tokenizer.encode(PROMPTS[0] * 2)  # far more than 40 drafter tokens
    controller = always_draft()
    controller.min_k = 8  # every step drafts its most: the drafter's timed steps must not pick the length
    engine = Engine(target, drafter, controller=controller, calibrate=False)
    assert list(engine.generate(prompt, 16)) == list(Engine(ReferenceBackend(model)).generate(prompt, 16))
    assert engine.last_stats.drafted > 0 and drafter.model.restarts > 0
