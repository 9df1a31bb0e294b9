"""Structured output: answers follow a JSON schema exactly, speculation stays lossless under
the grammar, and the tokens the grammar forces are drafted for free.

On the batch-invariant reference backend "lossless" is exact: greedy constrained speculation
with any drafter equals constrained decoding one token at a time, computed here without the
engine (the mask, the argmax, the next token)."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from edgespec import EdgeSpec
from edgespec.drafters import make_drafter
from edgespec.errors import EdgespecError
from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
from edgespec.speculative.drafter import EMPTY, Drafter
from edgespec.speculative.engine import Engine
from edgespec.speculative.idle import gate_of
from edgespec.structured.grammar import Grammar, GrammarError
from edgespec.speculative.verifier import SamplingParams, target_probs, verify_sampling
from helpers import always_draft
from test_verifier import CHI2_DF5_999, chi_square

CHI2_DF2_999 = 13.816

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "pet"],
          "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"},
                         "pet": {"enum": ["cat", "dog", "parrot"]}}}
RECEIPT = {"type": "object", "additionalProperties": False, "required": ["items", "total"],
           "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
               "type": "object", "additionalProperties": False, "required": ["item", "price"],
               "properties": {"item": {"type": "string", "maxLength": 8}, "price": {"type": "number"}}}},
               "total": {"type": "number"}}}
LABEL = {"type": "object", "additionalProperties": False, "required": ["label"],
         "properties": {"label": {"enum": ["positive", "negative", "neutral"]}}}
SCHEMAS = {"person": PERSON, "receipt": RECEIPT, "label": LABEL}
PROMPTS = ['Bob is 42 and has a dog: {"name": "Bob", "age": 42, "pet": "dog"}. Alice is 7. JSON: ',
           "Receipt: tea 2.50, cake 3.00, total 5.50. As JSON: ",
           "The film was dreadful. Sentiment: "]
MAX_TOKENS = 80


@pytest.fixture(scope="module")
def model():
    return ReferenceModel(seed=11)


def one_token_at_a_time(backend, grammar, prompt, n):
    """Constrained greedy decoding by the book, from an empty cache: evaluate one token, mask,
    take the argmax; the constraint closes the answer where the limit would cut it. It holds the
    backend as a generation does: an engine on it may be timing batches while idle."""
    constraint, out = grammar.constraint(backend.tokenizer), []
    constraint.begin(n)
    with gate_of(backend).generation():
        backend.rollback(0)
        logits = backend.eval(prompt, n_logits=1)
        while len(out) < n:
            for token in constraint.commit([int(np.argmax(constraint.masked([], logits)[0]))]):
                if backend.tokenizer.is_eog(token):
                    return out
                out.append(token)
            logits = backend.eval(out[-1:])
    return out


@pytest.fixture(scope="module")
def by_the_book(model):
    return {(name, i): one_token_at_a_time(ReferenceBackend(model), Grammar.json_schema(schema),
                                           ReferenceBackend(model).tokenizer.encode(p), MAX_TOKENS)
            for name, schema in SCHEMAS.items() for i, p in enumerate(PROMPTS)}


@pytest.mark.parametrize("drafter", ["none", "lookup", "ngram", "recycle", "auto"])
def test_greedy_constrained_speculation_equals_constrained_decoding_one_token_at_a_time(model, by_the_book,
                                                                                        drafter):
    backend = ReferenceBackend(model)
    controller = always_draft(max_k=8)  # verify every proposal in full
    engine = Engine(backend, None if drafter == "none" else make_drafter(drafter, backend.n_vocab, controller),
                    controller=controller, calibrate=False)
    for (name, i), expected in by_the_book.items():
        engine.reset()
        ids = backend.tokenizer.encode(PROMPTS[i])
        out = list(engine.generate(ids, MAX_TOKENS, constraint=Grammar.json_schema(SCHEMAS[name]).constraint(
            backend.tokenizer)))
        assert out == expected, (drafter, name, i)
        if engine.last_stats.finish_reason == "stop":
            jsonschema.validate(json.loads(backend.tokenizer.decode(out)), SCHEMAS[name])


class Silent(Drafter):
    """A drafter that never proposes: every draft token is the grammar's."""

    def propose(self, history, k):
        return EMPTY


def test_the_tokens_the_grammar_forces_are_drafted_free_and_counted_apart(model):
    backend = ReferenceBackend(model)
    engine = Engine(backend, Silent(), calibrate=False)
    prompt = backend.tokenizer.encode(PROMPTS[2])
    out = list(engine.generate(prompt, MAX_TOKENS, constraint=Grammar.json_schema(LABEL).constraint(backend.tokenizer)))
    st = engine.last_stats
    text = backend.tokenizer.decode(out)
    assert json.loads(text)["label"] in LABEL["properties"]["label"]["enum"]
    # '{"label": "' is forced, then the rest of the enum value once its first byte is chosen
    assert st.forced_tokens >= len('{"label": "') + 4
    assert st.steps < len(out) - st.forced_tokens + 3 and st.drafted == 0
    assert engine.last_stats.grammar_s > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_constrained_answers_are_valid(model, seed):
    backend = ReferenceBackend(model)
    controller = always_draft(max_k=8)
    engine = Engine(backend, make_drafter("auto", backend.n_vocab, controller), controller=controller,
                    calibrate=False)
    for name, schema in SCHEMAS.items():
        engine.reset()
        out = list(engine.generate(backend.tokenizer.encode(PROMPTS[0]), 200, SamplingParams(temperature=0.8, seed=seed),
                                   constraint=Grammar.json_schema(schema).constraint(backend.tokenizer)))
        assert engine.last_stats.finish_reason == "stop", name
        jsonschema.validate(json.loads(backend.tokenizer.decode(out)), schema)


TAGS = {"type": "object", "additionalProperties": False, "required": ["tags", "count"],
        "properties": {"tags": {"type": "array", "minItems": 1, "items": {"type": "string"}}, "count": {"type": "integer"}}}


@pytest.mark.parametrize("drafter", ["none", "auto"])
def test_an_answer_the_limit_would_cut_is_closed_valid_within_the_limit(model, drafter):
    """An unbounded list runs on to the limit; near it, the grammar closes the answer (the open
    string, the list, the required count): valid, within max_tokens, finish_reason "length".
    Greedy, the same tokens as constrained decoding one token at a time."""
    backend = ReferenceBackend(model)
    llm, grammar, closed = EdgeSpec(backend, drafter=drafter), Grammar.json_schema(TAGS), 0
    for max_tokens in (30, 40, 64):
        for prompt in PROMPTS:
            c = llm.generate(prompt, grammar=grammar, max_tokens=max_tokens)
            jsonschema.validate(c.parsed, TAGS)
            assert len(c.token_ids) <= max_tokens
            assert c.finish_reason == ("length" if c.stats.closed else "stop")
            closed += c.stats.closed
            expected = one_token_at_a_time(ReferenceBackend(model), grammar, backend.tokenizer.encode(prompt),
                                           max_tokens)
            assert c.token_ids == expected, (prompt, max_tokens)
            for seed in range(3):
                sampled = llm.generate(prompt, grammar=grammar, max_tokens=max_tokens, temperature=0.8, seed=seed)
                jsonschema.validate(sampled.parsed, TAGS)
                assert len(sampled.token_ids) <= max_tokens
    assert closed >= 3  # the limit came first for some: the closing ran


def test_a_limit_below_the_shortest_answer_is_one_clear_error(reference_backend):
    with pytest.raises(GrammarError, match=r"max_tokens 5 is too few for the shortest answer .* \(\d+ tokens\)"):
        EdgeSpec(reference_backend).generate(PROMPTS[0], json_schema=PERSON, max_tokens=5)


def test_a_sampled_draft_cut_where_the_grammar_refuses_keeps_the_masked_distribution():
    """A drafter drew x from q; where x is illegal the draft ends there and the target draws
    from the residual of the masked distribution p against q: each emitted token follows p."""
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(1, 6)) * 1.5
    legal = np.array([True, False, True, True, False, True])
    masked = np.repeat(np.where(legal, logits, -np.inf), 2, axis=0)  # row 1: after an accepted draft
    params = SamplingParams(temperature=1.0)
    p = target_probs(masked, params)[0]
    q = np.array([0.1, 0.4, 0.05, 0.2, 0.15, 0.1])  # much of it on illegal tokens
    counts = np.zeros(6, dtype=np.int64)
    for _ in range(20000):
        x = int(rng.choice(6, p=q))
        draft, rows = ([x], q[None]) if legal[x] else ([], q[None])  # cut: the refused draw's row stays
        v = verify_sampling(draft, rows, masked, params, rng)
        counts[x if v.n_accepted else v.next_token] += 1
    assert counts[~legal].sum() == 0
    assert chi_square(counts[legal], p[legal]) < CHI2_DF5_999


@pytest.mark.slow  # 3,000 answers
def test_sampled_speculation_under_a_grammar_draws_from_the_masked_distribution(model):
    """After '"a' (forced) the enum allows b, c or d; the prompt makes lookup draft c there. Over
    many seeds the token after '"a' follows the target's masked distribution, drafted or not."""
    backend = ReferenceBackend(model)
    tok = backend.tokenizer
    grammar = Grammar.json_schema({"enum": ["ab", "ac", "ad"]})
    prompt = tok.encode('say "ac" or "ab": "ac')
    params = lambda seed: SamplingParams(temperature=1.0, seed=seed)  # noqa: E731
    logits = backend.eval(prompt + [ord('"'), ord("a")])[-1]
    backend.rollback(0)
    p = target_probs(np.where(np.isin(np.arange(tok.n_vocab), [ord(c) for c in "bcd"]), logits, -np.inf), params(0))
    controller = always_draft(max_k=4)
    engine = Engine(backend, make_drafter("lookup", backend.n_vocab, controller), controller=controller,
                    calibrate=False)
    counts, drafted = np.zeros(tok.n_vocab, dtype=np.int64), 0
    for seed in range(3000):
        out = list(engine.generate(prompt, 4, params(seed), constraint=grammar.constraint(tok)))
        drafted += engine.last_stats.drafted
        if out[:2] == [ord('"'), ord("a")]:
            counts[out[2]] += 1
    assert drafted > 0 and counts.sum() == 3000
    assert chi_square(counts, p) < CHI2_DF2_999


def test_the_api_answers_with_the_parsed_value_and_response_format_as_openai_shapes_it(reference_backend):
    llm = EdgeSpec(reference_backend, drafter="auto")
    c = llm.generate(PROMPTS[0], json_schema=PERSON, max_tokens=120)
    assert c.finish_reason == "stop"
    jsonschema.validate(c.parsed, PERSON)
    fmt = {"type": "json_schema", "json_schema": {"name": "label", "schema": LABEL, "strict": True}}
    assert llm.generate(PROMPTS[2], response_format=fmt).parsed["label"] in LABEL["properties"]["label"]["enum"]
    labelled = llm.generate(PROMPTS[2], response_format={"type": "json_object", "schema": LABEL})  # llama-server's
    jsonschema.validate(labelled.parsed, LABEL)
    anything = llm.generate(PROMPTS[1], response_format={"type": "json_object"}, max_tokens=8)
    assert anything.finish_reason == "length" and isinstance(anything.parsed, dict)  # closed by the limit
    assert llm.generate(PROMPTS[1], response_format={"type": "text"}, max_tokens=4).parsed is None


@pytest.mark.parametrize("schema, says", [
    ({"type": "object", "properties": {"a": {"type": "strin"}}}, "cannot be compiled"),
    ("{not json", "not JSON"),
    ([1, 2], "a JSON schema is an object"),
])
def test_a_schema_that_cannot_be_compiled_is_one_clear_error(schema, says):
    with pytest.raises(GrammarError, match=says):
        Grammar.json_schema(schema)


@pytest.mark.parametrize("fmt, says", [
    ({"type": "xml"}, "not one of text, json_object, json_schema"),
    ({"type": "json_schema"}, "must be an object with a `schema` object"),
    ({"type": "json_schema", "json_schema": {"schema": 3}}, "must be an object with a `schema` object"),
])
def test_a_malformed_response_format_is_one_clear_error(fmt, says):
    with pytest.raises(EdgespecError, match=says):
        Grammar.response_format(fmt)


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    from edgespec.runtimes.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(smollm2_path, n_ctx=2048, n_threads=2)
    yield backend
    backend.close()


def structured_prompts(llm):
    """The bench's structured prompts, shipped and held out: (ids, grammar, what to check)."""
    from edgespec.bench.common import encode_prompt, load_prompts, output_format
    from edgespec.structured.tools import Tools

    for row in load_prompts("structured"):
        fmt = output_format(row)
        tools = Tools(**fmt) if "tools" in fmt else None
        yield encode_prompt(row, llm), llm.grammar(response_format=fmt.get("response_format"), tools=tools), row


def assert_answer_valid(llm, c, row):
    if "tools" in row:
        assert_calls_valid(c.tool_calls, row["tools"])
        return
    rf = row["response_format"]
    value = json.loads(c.text)
    if rf["type"] == "json_schema":
        jsonschema.validate(value, rf["json_schema"]["schema"])
    else:
        assert isinstance(value, dict)


def test_a_real_model_answers_every_structured_prompt_validly_greedy_and_sampled(smollm2, capsys):
    """Every answer is valid. The 135M model may loop (repeat a receipt's items, ramble inside a
    string) until the limit: the grammar closes such an answer there (finish_reason "length"),
    and they are listed here."""
    from edgespec.structured.tools import Tools

    llm = EdgeSpec(smollm2, drafter="auto")
    answers, closed = 0, []
    for ids, grammar, row in structured_prompts(llm):
        tools = Tools(row["tools"], row.get("tool_choice", "auto")) if "tools" in row else None
        for temperature, seed in [(0.0, None), (0.8, 0), (0.8, 1), (0.8, 2)]:
            c = llm.stream_ids(ids, max_tokens=400, temperature=temperature, seed=seed, grammar=grammar, tools=tools)
            for _ in c:
                pass
            if c.completion.stats.closed:
                closed.append((row["task"], seed))
            else:
                assert c.completion.finish_reason in ("stop", "tool_calls"), (row["task"], seed, c.completion.text)
            assert_answer_valid(llm, c.completion, row)
            answers += 1
    assert answers == 40 and len(closed) <= 20  # the grammar ran on ended answers, not only on closed ones
    with capsys.disabled():
        print(f"\n[smollm2-135m structured] {answers} answers valid; closed at the limit (task, seed): {closed}")


def test_on_a_real_model_constrained_speculation_matches_one_token_at_a_time_up_to_near_ties(smollm2, capsys):
    from test_real_lossless import NEAR_TIE, rescore_gaps

    llm = EdgeSpec(smollm2, drafter="none")
    controller = always_draft(max_k=8)
    engine = Engine(smollm2, make_drafter("auto", smollm2.n_vocab, controller), controller=controller,
                    calibrate=False)
    identical, gaps, forced, n = 0, [], 0, 0
    for ids, grammar, row in structured_prompts(llm):
        n += 1
        expected = one_token_at_a_time(smollm2, grammar, ids, 200)
        engine.reset()
        out = list(engine.generate(ids, 200, constraint=grammar.constraint(smollm2.tokenizer)))
        forced += engine.last_stats.forced_tokens
        if out == expected:
            identical += 1
            continue
        end = smollm2.tokenizer.eos_id  # where one stopped and the other went on
        j = next(i for i, (x, y) in enumerate(zip(out + [end], expected + [end])) if x != y)
        engine.reset()
        gaps.append(rescore_gaps(smollm2, ids, expected[:j], (out + [end])[j], (expected + [end])[j]))
    with capsys.disabled():
        print(f"\n[smollm2-135m constrained, auto] identical: {identical}/{n}; "
              f"gaps {[(round(a, 3), round(b, 3)) for a, b, _ in gaps]}; forced tokens {forced}")
    assert forced > 0
    assert all(min(seq, one) < NEAR_TIE for seq, one, _ in gaps), gaps


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "required": ["city"], "additionalProperties": False,
                          "properties": {"city": {"type": "string", "maxLength": 12},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}}}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "Local time in a city",
         "parameters": {"type": "object", "required": ["city"], "additionalProperties": False,
                        "properties": {"city": {"type": "string", "maxLength": 12}}}}}
ASK = [{"role": "user", "content": "Weather in Paris and the time in Tokyo?"}]


@pytest.fixture
def roomy_backend():
    """The reference model with room for the tools' system message, a byte a token."""
    return ReferenceBackend(ReferenceModel(seed=0, n_ctx=4096))


def assert_calls_valid(calls, tools, names=None):
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert calls
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert call["function"]["name"] in (names or by_name)
        jsonschema.validate(json.loads(call["function"]["arguments"]), by_name[call["function"]["name"]])


@pytest.mark.parametrize("temperature, seed", [(0.0, None), (0.8, 0), (0.8, 1), (0.8, 2)])
def test_tool_choice_is_obeyed_and_every_call_names_a_tool_with_valid_arguments(roomy_backend, temperature, seed):
    llm = EdgeSpec(roomy_backend, drafter="auto")
    kw = dict(max_tokens=300, temperature=temperature, seed=seed)
    single = llm.chat(ASK, tools=[WEATHER, CLOCK], tool_choice="required", parallel_tool_calls=False, **kw)
    assert single.finish_reason == "tool_calls" and single.text == "" and len(single.tool_calls) == 1
    assert_calls_valid(single.tool_calls, [WEATHER, CLOCK])
    named = llm.chat(ASK, tools=[WEATHER, CLOCK], tool_choice={"type": "function", "function": {"name": "get_time"}},
                     **kw)
    assert named.finish_reason == "tool_calls" and len(named.tool_calls) == 1
    assert_calls_valid(named.tool_calls, [WEATHER, CLOCK], names=["get_time"])
    # a random model rarely ends: parallel calls run to the limit, every complete one valid
    several = llm.chat(ASK, tools=[WEATHER, CLOCK], tool_choice="required", **kw)
    assert len(several.tool_calls) > 1 and several.text == ""
    assert_calls_valid(several.tool_calls, [WEATHER, CLOCK])
    none = llm.chat(ASK, tools=[WEATHER, CLOCK], tool_choice="none", max_tokens=40, temperature=temperature, seed=seed)
    assert none.tool_calls == [] and "<tool_call>" not in none.text


def test_an_answer_with_calls_streams_only_its_text():
    from edgespec.structured.tools import Tools

    tools = Tools([WEATHER])
    text = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert tools.shown(text[:12]) == 12 and tools.shown(text[:18]) == len("Let me look.\n")  # "<tool" held back
    content, calls = tools.split(text)
    assert content == "Let me look.\n" and json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"}


def test_a_call_whose_argument_holds_the_closing_tag_is_read_whole():
    """An argument is any JSON string: a call's end is where its JSON ends, not the next tag."""
    from edgespec.structured.tools import Tools

    email = {"type": "function", "function": {"name": "send_email", "parameters": {
        "type": "object", "properties": {"body": {"type": "string"}}}}}
    body = "See you at 5!</tool_call> <tool_call>{not a call}"
    text = ('<tool_call>\n{"name": "send_email", "arguments": {"body": ' + json.dumps(body) + '}}\n</tool_call>\n'
            '<tool_call>\n{"name": "send_email", "arguments": {}}\n</tool_call>')
    content, calls = Tools([email]).split(text)
    assert content is None and [json.loads(c["function"]["arguments"]) for c in calls] == [{"body": body}, {}]


def test_a_tool_result_goes_back_through_the_template_and_the_answer_goes_on(roomy_backend):
    llm = EdgeSpec(roomy_backend, drafter="auto")
    first = llm.chat(ASK, tools=[WEATHER], tool_choice="required", max_tokens=200)
    call = first.tool_calls[0]
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": first.tool_calls},
                      {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21C"}]
    from edgespec.structured.tools import Tools

    prompt = llm.apply_chat_template(messages, tools=Tools([WEATHER]))
    assert "sunny, 21C" in prompt and call["function"]["arguments"] in prompt and "get_weather" in prompt
    assert llm.chat(messages, tools=[WEATHER], tool_choice="none", max_tokens=20).finish_reason in ("stop", "length")


@pytest.mark.parametrize("tools, choice, says", [
    ([{"type": "function", "function": {"name": "has space"}}], "auto", "a name of letters"),
    ([WEATHER], {"type": "function", "function": {"name": "nope"}}, "not among the tools"),
    ([WEATHER], "sometimes", "tool_choice must be"),
    ([], "auto", "1 to 128 tools"),
    ([WEATHER], {"type": "function", "function": "get_weather"}, "tool_choice must be"),
])
def test_tools_that_cannot_be_honoured_are_one_clear_error(tools, choice, says):
    from edgespec.structured.tools import Tools

    with pytest.raises(EdgespecError, match=says):
        Tools(tools, choice)


def test_an_earlier_call_that_is_not_a_call_is_one_clear_error(roomy_backend):
    llm = EdgeSpec(roomy_backend)
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [{"function": "get_weather"}]}]
    from edgespec.structured.tools import Tools

    with pytest.raises(EdgespecError, match="an earlier tool call must be"):
        llm.chat_ids(messages, Tools([WEATHER]))


def test_auto_reads_a_call_written_in_a_json_block_and_holds_it_to_the_tools(roomy_backend):
    """Qwen2.5-Coder often answers "auto" with a JSON block naming a tool: that is a call (as
    llama.cpp's Hermes parser reads it), held to the tool's parameters. Text may come before a
    <tool_call>; a JSON block that names no tool is text."""
    from edgespec.structured.tools import Tools

    tools, tok = Tools([WEATHER, CLOCK]), roomy_backend.tokenizer

    def allowed(text, choice="auto"):
        ids = tok.encode(text, add_bos=False)
        return Tools([WEATHER, CLOCK], choice).grammar().constraint(tok).legal(ids) == len(ids)

    fenced = '```json\n{\n  "name": "get_time",\n  "arguments": {"city": "Tokyo"}\n}\n```'
    content, calls = tools.split(fenced)
    assert allowed(fenced) and content is None and len(calls) == 1
    assert calls[0]["function"]["name"] == "get_time" and json.loads(calls[0]["function"]["arguments"]) == {"city": "Tokyo"}
    laid_out = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Lisbon",\n    "unit": "celsius"\n  }\n}\n```'
    assert allowed(laid_out) and allowed(laid_out.replace(", ", ",").replace(": ", ":"))  # its whitespace is free
    assert tools.shown(fenced[:5]) == tools.shown(fenced[:30]) == 0  # streams no text
    assert not allowed('```json\n{"name": "get_time", "arguments": {"town": "Oslo"}}\n```')  # not its parameters
    for other in ['```json\n{"city": "Paris"}\n```', '```json\n{"name": "Bob", "age": 3}\n```']:  # no tool named
        assert allowed(other) and tools.split(other) == (other, []) and tools.shown(other) == len(other)
    said = 'Let me look. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert allowed(said) and tools.split(said)[0] == "Let me look. " and len(tools.split(said)[1]) == 1
    assert allowed(fenced, "none") and Tools([WEATHER], "none").split(fenced) == (fenced, [])  # "none": text


def test_one_constraint_at_a_time_through_the_api(reference_backend):
    """json_schema, response_format, tools and a compiled grammar are four spellings of one
    constraint: asking for two is one clear error, whichever two."""
    from edgespec.structured.tools import Tools

    llm = EdgeSpec(reference_backend)
    schema = {"type": "object"}
    for asked in ({"json_schema": schema, "response_format": {"type": "json_object"}},
                  {"json_schema": schema, "tools": Tools([WEATHER])},
                  {"grammar": llm.grammar(json_schema=schema), "response_format": {"type": "json_object"}}):
        with pytest.raises(EdgespecError, match="ask for one of"):
            llm.generate(PROMPTS[0], max_tokens=4, **asked)
    text_too = llm.generate(PROMPTS[0], max_tokens=8, json_schema=schema, response_format={"type": "text"})
    assert isinstance(text_too.parsed, dict)  # {"type": "text"} asks for nothing
