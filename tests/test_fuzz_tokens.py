"""Fuzzing the tokenizer and drafter code paths: random text, random
bytes and random token ids go through the real SmolLM2 tokenizer (llama.cpp), the
cross-vocabulary text view, every model-free drafter and the whole speculation
loop. Nothing may crash the process, every id that comes out is in the
vocabulary, and speculation stays lossless whatever the input.

CI runs a bounded number of examples; EDGESPEC_FUZZ_EXAMPLES=N runs longer (as in
test_hostile_gguf.py).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import always_draft
from edgespec.drafters import CrossVocabDrafter, make_drafter
from edgespec.drafters.translate import TextView
from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
from edgespec.speculative.engine import Engine
from merged_vocab import MergedVocabBackend

EXAMPLES = int(os.environ.get("EDGESPEC_FUZZ_EXAMPLES", "0")) or None
FUZZ = settings(max_examples=EXAMPLES or 60, deadline=None, derandomize=EXAMPLES is None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DRAFTERS = ["lookup", "ngram", "recycle", "auto"]

# text with the shapes that stress tokenizers: runs of one character, mixed scripts,
# control characters, special-token text, lone combining marks
texts = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.sampled_from(list(" \n\t\r0aZ_.-<|>éß日本語🙂\u0301\x00")), max_size=120),
    st.lists(st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "user\n", "  ", "\n\n", "def ", "🙂",
                              "\u200b", "\ufeff"]), max_size=12).map("".join),
)


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    from edgespec.runtimes.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(smollm2_path, n_ctx=512)
    yield backend
    backend.close()


@pytest.mark.real_model
@FUZZ
@given(text=texts)
def test_any_text_tokenizes_into_the_vocabulary_and_spells_itself_back(smollm2, text):
    tok = smollm2.tokenizer
    # what the vocabulary cannot spell at all is dropped (for SmolLM2 in llama.cpp: six
    # ASCII control characters and unassigned code points of planes 4-13); everything
    # else must come back exactly, merges included
    spellable = "".join(ch for ch in text if tok.decode(tok.encode(ch, add_bos=False, special=False)) == ch)
    plain = tok.encode(spellable, add_bos=False, special=False)
    assert all(0 <= t < tok.n_vocab for t in plain)
    assert tok.decode(plain) == spellable
    parsed = tok.encode(text, add_bos=True, special=True)  # chat templates parse control tokens
    assert all(0 <= t < tok.n_vocab for t in parsed)
    assert all(isinstance(tok.token_text(t), str) for t in parsed)


@pytest.mark.real_model
@FUZZ
@given(token=st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(49_100, 49_200), st.integers(-3, 3)))
def test_any_token_id_is_either_spelled_or_refused_never_a_crash(smollm2, token):
    tok = smollm2.tokenizer
    if 0 <= token < tok.n_vocab:
        assert isinstance(tok.token_bytes(token), bytes) and isinstance(tok.token_text(token), str)
    else:  # llama.cpp itself would abort the process on these (std::out_of_range)
        with pytest.raises(ValueError, match="outside the vocabulary"):
            tok.token_bytes(token)
        with pytest.raises(ValueError, match="outside the vocabulary"):
            tok.token_text(token)


@pytest.mark.real_model
@FUZZ
@given(data=st.binary(max_size=160), cuts=st.lists(st.integers(1, 9), min_size=1, max_size=40))
def test_random_bytes_in_random_chunks_keep_a_text_view_consistent(smollm2, data, cuts):
    """What a cross-vocabulary drafter does with a model's output: any bytes (invalid
    UTF-8 included), in any chunks, give in-vocabulary ids whose token ends rise
    within the complete characters seen so far."""
    view = TextView(smollm2.tokenizer)
    i, c = 0, 0
    while i < len(data):
        n = cuts[c % len(cuts)]
        first = view.append(data[i : i + n])
        i, c = i + n, c + 1
        assert 0 <= first <= len(view.ids)
        assert all(0 <= t < smollm2.tokenizer.n_vocab for t in view.ids)
        assert len(view.ends) == len(view.ids) and view.ends == sorted(view.ends)
        assert all(0 < e <= view.done for e in view.ends)  # offsets into the text (unspellable bytes vanish)
        assert 0 <= view.pending <= 3  # at most an incomplete UTF-8 character waits


@FUZZ
@given(name=st.sampled_from(DRAFTERS), n_vocab=st.sampled_from([2, 17, 259, 49_152]),
       steps=st.lists(st.tuples(st.lists(st.integers(0, 5), max_size=30), st.integers(0, 16), st.booleans()),
                      min_size=1, max_size=12))
def test_drafters_propose_only_vocabulary_ids_for_any_history(name, n_vocab, steps):
    """Random histories, that grow or are rewritten (a chat edited, a new prompt),
    with random draft lengths: every proposal is a list of at most k ids in range."""
    rng = np.random.default_rng(len(steps))
    controller = always_draft(8)
    drafter = make_drafter(name, n_vocab, controller)
    history: list[int] = []
    for tail, k, restart in steps:
        tail = [t % n_vocab for t in tail] or [0]
        if restart:  # a new generation from an unrelated history
            history = [t * 7 % n_vocab for t in tail]
            drafter.begin(history)
        else:
            history = history + tail
        draft = drafter.propose(history, k)
        assert len(draft.tokens) <= k
        assert all(isinstance(t, int) and 0 <= t < n_vocab for t in draft.tokens), draft.tokens
        inputs = [history[-1], *draft.tokens]
        drafter.observe(history, inputs, rng.standard_normal((len(inputs), n_vocab)).astype(np.float32))
        history = history + draft.tokens[: rng.integers(0, len(draft.tokens) + 1)]


@pytest.fixture(scope="module")
def model():
    return ReferenceModel(seed=3)


def _drafter(name: str, model: ReferenceModel, target, controller):
    """A model-free drafter by name, or a cross-vocabulary model drafter: `cross`
    drafts with merged tokens for a byte-level target, `cross-back` the reverse."""
    if name == "cross":
        return CrossVocabDrafter(MergedVocabBackend(model), target.tokenizer, p_min=0.0)
    if name == "cross-back":
        return CrossVocabDrafter(ReferenceBackend(model), target.tokenizer, p_min=0.0)
    return make_drafter(name, target.n_vocab, controller)


@settings(FUZZ, max_examples=(EXAMPLES or 60) // 2)
@given(name=st.sampled_from([*DRAFTERS, "cross", "cross-back"]),
       text=texts.filter(lambda t: 0 < len(t.encode()) < 200), repeat=st.integers(1, 3))
def test_greedy_speculation_is_lossless_for_any_prompt(model, name, text, repeat):
    """The whole loop (draft, translate, verify, roll back) on batch-invariant
    backends: any prompt, repeated so drafters find matches, gives plain decoding's
    tokens."""
    target = MergedVocabBackend(model) if name == "cross-back" else ReferenceBackend(model)
    ids = target.tokenizer.encode(text * repeat)
    expected = list(Engine(target).generate(ids, 24))
    controller = always_draft(8)
    engine = Engine(target, _drafter(name, model, target, controller), controller=controller, calibrate=False)
    assert list(engine.generate(ids, 24)) == expected
