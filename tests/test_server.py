"""`edgespec serve` driven by the official openai client, as an editor or agent would."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openai import OpenAI

from edgespec import EdgeSpec
from edgespec.apps.server import Limits, LocalServer
from edgespec.runtimes.reference import ReferenceBackend

MODEL = "smollm2-135m"
JSON = {"content-type": "application/json"}
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"  # continues for as long as it is allowed to


@pytest.fixture(scope="module")
def server(smollm2_path):
    """A real `edgespec serve` process on a free port, with the real SmolLM2-135M."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "serve", MODEL, "-d", "auto", "--port", "0", "--ctx", "1024",
         "--max-tokens-limit", "600", "--max-body", "65536"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # printed once requests are accepted
    m = re.search(r"(http://\S+/v1)", line)
    if m is None:
        proc.kill()
        pytest.fail(f"the server did not start: {line!r} {proc.stderr.read()}")
    yield m.group(1)
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture
def client(server):
    return OpenAI(base_url=server, api_key="unused", max_retries=0)


def health(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/health").json()


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_chat_completion_reports_usage_and_speculation_stats(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Name three colours."}],
                                       temperature=0, max_tokens=32)
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and 1 <= r.usage.completion_tokens <= 32
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    stats = r.model_extra["edgespec"]  # the extension field
    assert stats["generated_tokens"] == r.usage.completion_tokens
    assert {"drafted", "accepted", "tokens_per_s", "acceptance_by_position"} <= set(stats)


def test_streaming_chat_sends_pieces_then_finish_and_usage(client):
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Write a haiku about the sea."}], temperature=0,
        max_tokens=48, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and text.strip()
    usage = chunks[-1].usage  # include_usage: one last chunk with no choices
    assert chunks[-1].choices == [] and usage.completion_tokens == finals[0].model_extra["edgespec"]["generated_tokens"]


def test_completions_endpoint_streaming_and_not(client):
    r = client.completions.create(model=MODEL, prompt="def fibonacci(n):", temperature=0, max_tokens=24)
    assert r.object == "text_completion" and r.choices[0].text and r.usage.completion_tokens <= 24
    pieces = [c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt=COUNTING, temperature=0, max_tokens=16, stream=True)]
    assert "".join(pieces).strip().startswith("13")


BAD_REQUESTS = [
    # (what is wrong, body, status, code)
    ("malformed JSON", b'{"model": "smollm2-135m", "messages": [', 400, "invalid_json"),
    ("not an object", b"[1, 2]", 400, "invalid_json"),
    ("unknown model", {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, 404, "model_not_found"),
    ("missing messages", {"model": MODEL}, 400, "invalid_value"),
    ("messages of the wrong type", {"model": MODEL, "messages": "hi"}, 400, "invalid_value"),
    ("unknown role", {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, 400, "invalid_value"),
    ("negative max_tokens", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": -1},
     400, "invalid_value"),
    ("max_tokens over the limit", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 100_000}, 400, "invalid_value"),
    ("max_tokens as text", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": "64"},
     400, "invalid_value"),
    ("temperature out of range", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                  "temperature": 9}, 400, "invalid_value"),
    ("several answers", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 3},
     400, "unsupported_parameter"),
    ("image content", {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     400, "unsupported_content"),
    ("prompt longer than the context", {"model": MODEL, "messages": [{"role": "user", "content": "word " * 3000}]},
     400, "context_length_exceeded"),
    ("body over --max-body", {"model": MODEL, "messages": [{"role": "user", "content": "x" * 70_000}]},
     413, "body_too_large"),
]


@pytest.mark.parametrize("what,body,status,code", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_requests_get_a_4xx_json_error(server, what, body, status, code):
    url = server + "/chat/completions"
    r = httpx.post(url, content=body, headers=JSON) if isinstance(body, bytes) else httpx.post(url, json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and error["message"]


def test_unknown_routes_and_methods_get_json_errors_too(server):
    r = httpx.get(server + "/nothing/here")
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.get(server + "/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["message"]


def test_a_client_that_leaves_mid_stream_frees_the_model(client, server):
    before = health(server)["cancelled"]
    with client.completions.with_streaming_response.create(
            model=MODEL, prompt=COUNTING, temperature=0, max_tokens=600, stream=True) as response:
        lines = response.iter_lines()
        got = [line for line, _ in zip(lines, range(6)) if line.startswith("data:")]
        assert got  # the answer had begun
    # the connection is closed: the job is cancelled long before its 600 tokens
    deadline = time.monotonic() + 15
    while (h := health(server))["busy"] or h["cancelled"] == before:
        assert time.monotonic() < deadline, h
        time.sleep(0.1)
    r = client.completions.create(model=MODEL, prompt="The sky is", temperature=0, max_tokens=8)
    assert r.usage.completion_tokens >= 1


def test_serving_a_file_outside_the_store_needs_allow_path(smollm2_path):
    r = subprocess.run([sys.executable, "-m", "edgespec", "serve", str(smollm2_path), "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "--allow-path" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# -- the server's own logic, on the batch-invariant reference backend ------------------
# The reference model's greedy output depends on nothing but the prompt, so every
# answer can be checked exactly while requests from several clients interleave.

def reference_server(**kw) -> LocalServer:
    llm = EdgeSpec(ReferenceBackend(), drafter="auto")
    return LocalServer(llm, "reference", port=0, **kw)


def test_fifty_requests_from_four_clients_all_get_their_own_answer():
    prompts = [f"request {i}: tell me about {w}" for i, w in enumerate(["cats", "rivers", "maps", "bread"] * 13)][:50]
    expected_llm = EdgeSpec(ReferenceBackend(), drafter="none")
    expected = {p: expected_llm.chat([{"role": "user", "content": p}], max_tokens=20).text for p in prompts}

    with reference_server(limits=Limits(max_queue=8)) as srv:
        clients = [OpenAI(base_url=srv.url, api_key="unused", max_retries=0) for _ in range(4)]

        def ask(i: int) -> tuple[str, str]:
            c, p = clients[i % 4], prompts[i]
            kw = dict(model="reference", messages=[{"role": "user", "content": p}], temperature=0, max_tokens=20)
            if i % 2:  # half of them stream
                return p, "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
                    stream=True, **kw) if ch.choices)
            return p, c.chat.completions.create(**kw).choices[0].message.content

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, range(50)))
    assert len(answers) == 50
    assert all(got == expected[p] for p, got in answers)


def test_a_full_queue_answers_503_not_a_hang():
    with reference_server(limits=Limits(max_queue=1)) as srv:
        kw = dict(model="reference", prompt="a long story", temperature=0, max_tokens=4000)
        with httpx.stream("POST", srv.url + "/completions", json={**kw, "stream": True}) as running:
            lines = running.iter_lines()
            next(lines)  # the model is busy with this one
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(httpx.post, srv.url + "/completions", json=kw, timeout=120)
                deadline = time.monotonic() + 10
                while health(srv.url)["queued"] < 1:  # the queue's one place is taken
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                refused = httpx.post(srv.url + "/completions", json=kw)
                assert refused.status_code == 503 and refused.json()["error"]["code"] == "queue_full"
        # the stream's client left: the waiting request is served
        assert waiting.result().status_code == 200


def test_api_key_and_closed_cors():
    with reference_server(api_key="s3cret") as srv:
        assert httpx.get(srv.url + "/models").status_code == 401
        ok = OpenAI(base_url=srv.url, api_key="s3cret", max_retries=0)
        assert [m.id for m in ok.models.list().data] == ["reference"]
        preflight = httpx.options(srv.url + "/chat/completions", headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in preflight.headers


CITY = {"type": "object", "additionalProperties": False, "required": ["city", "country"],
        "properties": {"city": {"type": "string", "maxLength": 40}, "country": {"type": "string", "maxLength": 40}}}
ASK_CITY = [{"role": "user", "content": "Name the capital of France and its country, as JSON."}]


@pytest.mark.parametrize("stream", [False, True])
def test_response_format_json_schema_answers_json_that_validates(client, stream):
    import jsonschema

    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    r = client.chat.completions.create(model=MODEL, messages=ASK_CITY, response_format=fmt, max_tokens=120,
                                       temperature=0, stream=stream)
    text = "".join(c.choices[0].delta.content or "" for c in r) if stream else r.choices[0].message.content
    jsonschema.validate(json.loads(text), CITY)


def test_the_openai_client_parses_into_a_pydantic_model(client):
    from pydantic import BaseModel, Field

    class City(BaseModel):
        city: str = Field(max_length=40)
        country: str = Field(max_length=40)

    r = client.chat.completions.parse(model=MODEL, messages=ASK_CITY, response_format=City, max_tokens=120)
    assert isinstance(r.choices[0].message.parsed, City)


def test_response_format_json_object_answers_an_object(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK_CITY, response_format={"type": "json_object"},
                                       max_tokens=200, temperature=0)
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_a_schema_that_cannot_be_compiled_is_a_400_naming_it(server):
    body = {"model": MODEL, "messages": ASK_CITY,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}}}
    r = httpx.post(f"{server}/chat/completions", json=body, timeout=30)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "response_format" and "cannot be compiled" in err["message"]
    assert health(server.removesuffix("/v1"))["status"] == "ok"


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string", "maxLength": 40}}}}}


@pytest.mark.parametrize("stream", [False, True])
def test_a_tools_round_trip_with_the_openai_client(client, stream):
    """The model calls the tool, gets its result back as a `tool` message, and answers."""
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]

    def ask(**kw):
        r = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL], max_tokens=150,
                                           temperature=0, stream=stream, **kw)
        if not stream:
            return r.choices[0].finish_reason, r.choices[0].message.content, r.choices[0].message.tool_calls
        text, calls, finish = "", [], None
        for chunk in r:
            delta = chunk.choices[0].delta
            text += delta.content or ""
            calls += delta.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
        return finish, text or None, calls

    finish, _, calls = ask(tool_choice="required")
    assert finish == "tool_calls" and calls and all(c.function.name == "get_weather" for c in calls)
    assert "city" in json.loads(calls[0].function.arguments)
    messages += [{"role": "assistant", "content": None, "tool_calls": [
                     {"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                                   "arguments": c.function.arguments}}
                     for c in calls]},
                 *({"role": "tool", "tool_call_id": c.id, "content": "sunny, 21 C"} for c in calls)]
    finish, text, calls = ask(tool_choice="none")
    assert finish in ("stop", "length") and text and not calls


def test_tools_the_server_cannot_honour_are_a_400_naming_them(server):
    body = {"model": MODEL, "messages": ASK_CITY, "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    r = httpx.post(f"{server}/chat/completions", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    assert "not among the tools" in r.json()["error"]["message"]
    both = {"model": MODEL, "messages": ASK_CITY, "tools": [WEATHER_TOOL], "response_format": {"type": "json_object"}}
    r = httpx.post(f"{server}/chat/completions", json=both, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    assert "ask for one of" in r.json()["error"]["message"]
    text_too = {**both, "response_format": {"type": "text"}, "max_tokens": 4}  # "text" asks for nothing
    assert httpx.post(f"{server}/chat/completions", json=text_too, timeout=60).status_code == 200
