"""The Python API as a desktop app uses it: stream, stop, cancel, chat, stats."""

import threading

import pytest

from helpers import ScriptedBackend
from edgespec import ContextOverflowError, EdgeSpec
from edgespec.runtimes.reference import ReferenceBackend

TEXT = "Grüße aus Köln! 東京で会いましょう 🚀 done."


def test_stream_yields_whole_utf8_characters_only():
    llm = EdgeSpec(ScriptedBackend(TEXT), drafter="none")
    pieces = list(llm.stream("hi", max_tokens=200))
    # a byte-level model emits multi-byte characters one byte at a time; the
    # stream must hold partial characters back instead of yielding U+FFFD
    assert "".join(pieces) == TEXT
    assert all("\ufffd" not in p for p in pieces)
    assert llm.last_stats.finish_reason == "stop"  # the script ends with EOS


def test_generate_returns_text_ids_and_stats():
    llm = EdgeSpec(ScriptedBackend("abc abc abc abc abc"), drafter="lookup")
    c = llm.generate("x", max_tokens=100)
    assert c.text == "abc abc abc abc abc"
    assert c.prompt_ids == llm.tokenize("x")
    assert bytes(c.token_ids).decode() == c.text
    d = c.to_dict()
    assert {"text", "prompt_ids", "token_ids", "stats"} <= set(d)
    assert {"tokens_per_s", "acceptance_rate", "mean_accepted"} <= set(d["stats"])


def test_max_tokens_and_stop_strings_end_the_answer():
    llm = EdgeSpec(ScriptedBackend("one two three four"), drafter="none")
    assert llm.generate("x", max_tokens=3).text == "one"
    c = llm.generate("x", max_tokens=100, stop=[" three"])
    assert c.text == "one two" and c.finish_reason == "stop"


def test_a_stop_string_forming_over_several_tokens_is_never_streamed():
    llm = EdgeSpec(ScriptedBackend("one two three four"), drafter="none")
    pieces = list(llm.stream("x", max_tokens=100, stop=[" thr", "never"]))
    # one byte a token: " t" and " th" were held back until " thr" showed they were the stop's
    assert "".join(pieces) == "one two" and len(pieces) > 1


def test_cancel_from_another_thread_stops_the_stream():
    llm = EdgeSpec(ReferenceBackend(), drafter="auto")
    stream = llm.stream("tell me a long story", max_tokens=10_000)
    first = next(iter(stream))
    t = threading.Thread(target=stream.cancel)
    t.start()
    t.join()
    rest = "".join(stream)
    assert stream.completion.finish_reason == "cancelled"
    assert stream.completion.text == first + rest
    assert len(stream.token_ids) < 10_000
    # the backend is free for the next call
    assert llm.generate("again", max_tokens=5).stats.generated_tokens == 5


def test_chat_uses_the_models_template():
    llm = EdgeSpec(ScriptedBackend("Paris."), drafter="none")
    msgs = [{"role": "user", "content": "Capital of France?"}]
    assert llm.apply_chat_template(msgs) == "<|user|>\nCapital of France?</s>\n<|assistant|>\n"
    c = llm.chat(msgs)
    assert c.text == "Paris."
    assert llm.tokenizer.EOS in c.prompt_ids  # "</s>" in the template became the special token


def test_a_prompt_longer_than_the_context_is_refused():
    llm = EdgeSpec(ReferenceBackend(n_ctx=64), drafter="none")
    with pytest.raises(ContextOverflowError, match="the context holds 64"):
        llm.generate("x" * 100)


def test_generation_stops_cleanly_when_the_context_fills():
    llm = EdgeSpec(ReferenceBackend(n_ctx=64), drafter="auto")
    c = llm.generate("x" * 40, max_tokens=1000)
    assert c.stats.finish_reason in ("context", "stop")
    assert len(c.prompt_ids) + len(c.token_ids) <= 65


def test_stats_report_speed_and_acceptance_per_position():
    llm = EdgeSpec(ScriptedBackend("ab" * 60), drafter="lookup")
    llm.engine.controller.cost.set_timed({n: 1.0 for n in range(1, 18)})  # any batch costs one token
    st = llm.generate("x", max_tokens=120).stats
    assert st.generated_tokens == 120
    assert st.drafted > 0 and st.acceptance_rate > 0.8
    assert st.mean_accepted > 2
    assert st.acceptance_by_position[0] > 0.8
    assert st.tokens_per_s > 0
