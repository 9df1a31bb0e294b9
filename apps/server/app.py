"""An OpenAI-compatible local server over the public API (`edgespec serve`).

    /v1/models, /v1/chat/completions, /v1/completions (streaming by server-sent
    events), /health, /metrics (Prometheus text)

One model, one generation at a time: requests wait in a bounded queue and are
served in turn by a single worker thread that owns the model (as llama-server
does with one slot). A client that goes away, mid-stream or while waiting,
cancels its job, so the model is free for the next request. Every malformed
request gets a 4xx JSON error in OpenAI's shape; without an API key only local
clients are served (guard.py). Prompts are prepared off the event loop, so
/health answers at once whatever a request holds. Replies carry `usage` and,
in the extension field `edgespec`, the speculation statistics.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, AsyncIterator

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from edgespec import EdgeSpec, EdgespecError, Tools
from edgespec.apps.server.guard import LocalOnly
from edgespec.apps.server.metrics import StatusCounter, render as render_metrics
from edgespec.apps.server.protocol import (FINISH, ApiError, ChatRequest, CompletionRequest, Reply, SamplingFields,
                                           chat_message, check_common, parse, sse_event)
from edgespec.apps.server.worker import Job, ModelWorker, PromptWorker


@dataclass
class Limits:
    max_body_bytes: int = 1 << 20  # a request body larger than this is refused unread (413)
    max_tokens: int = 4096  # the largest max_tokens a request may ask for
    max_queue: int = 8  # requests waiting behind the running one; more get 503
    timeout_s: float | None = None  # a request not answered by then is cancelled (504)



# -- the application -----------------------------------------------------------

@dataclass
class Served:
    """What the routes serve from (the app's `state.served`): the model, its worker threads
    and the server's limits."""

    llm: EdgeSpec
    model_id: str
    limits: Limits
    api_key: str | None
    worker: ModelWorker
    prompts: PromptWorker
    requests: Counter  # responses by status, for /metrics
    created: int


async def served(request: Request) -> Served:  # async: dependencies run on the event loop, not in a thread
    return request.app.state.served


async def authorize(request: Request) -> None:
    """With an API key, every /v1 request must carry it (OpenAI's Bearer header)."""
    api_key = request.app.state.served.api_key
    if api_key is None:
        return
    given = request.headers.get("authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
        raise ApiError(401, "a valid API key is required (Authorization: Bearer KEY)", code="invalid_api_key")


status = APIRouter()  # answers whoever may reach the server: the local-only guard still applies
v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorize)])


def create_app(llm: EdgeSpec, model_id: str, limits: Limits | None = None, api_key: str | None = None,
               cors_origins: list[str] | None = None, allowed_hosts: set[str] = frozenset()) -> FastAPI:
    """The server's ASGI app; `uvicorn.run(create_app(llm, "name"))` serves it.
    Without `api_key`, only Host headers naming loopback or `allowed_hosts` are served."""
    limits = limits or Limits()
    state = Served(llm, model_id, limits, api_key, ModelWorker(llm, limits.max_queue), PromptWorker(limits.max_queue),
                   Counter(), int(time.time()))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        state.worker.stop()
        state.prompts.stop()

    app = FastAPI(title="edgespec", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.served = state
    if api_key is None:
        app.add_middleware(LocalOnly, hosts=set(allowed_hosts))
    if cors_origins:  # closed unless asked: a web page must not drive a local model by default
        app.add_middleware(CORSMiddleware, allow_origins=cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(StatusCounter, counts=state.requests)  # added last: outermost, so refusals count too
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.include_router(status)
    app.include_router(v1)
    return app


async def _api_error(request: Request, e: ApiError) -> JSONResponse:
    return e.response()


async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
    return ApiError(e.status_code, str(e.detail), code="not_found" if e.status_code == 404 else None).response()


@status.get("/health")
async def health(s: Served = Depends(served)) -> dict:
    return {"status": "ok", "busy": s.worker.running is not None, "queued": s.worker.jobs.qsize(), **s.worker.counts}


@status.get("/metrics")
async def metrics(s: Served = Depends(served)) -> Response:
    return Response(render_metrics(s.requests, s.worker, s.prompts.waiting), media_type="text/plain; version=0.0.4")


@v1.get("/models")
async def models(s: Served = Depends(served)) -> dict:
    return {"object": "list", "data": [_model_card(s)]}


@v1.get("/models/{name:path}")
async def model(name: str, s: Served = Depends(served)) -> dict:
    if name != s.model_id:
        raise ApiError(404, f"the model {name!r} does not exist; this server has {s.model_id!r}",
                       param="model", code="model_not_found")
    return _model_card(s)


@v1.post("/chat/completions")
async def chat_completions(request: Request, s: Served = Depends(served)) -> Response:
    req = await s.prompts.run(parse, ChatRequest, await _read_body(request, s.limits))
    check_common(req, s.model_id)
    messages = [chat_message(m, i) for i, m in enumerate(req.messages)]
    tools = await s.prompts.run(Tools, req.tools, req.tool_choice or "auto", req.parallel_tool_calls,
                                param="tools") if req.tools else None
    ids = await s.prompts.run(s.llm.chat_ids, messages, tools, param="messages")
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    return await _answer(request, s, req, ids, max_tokens, chat=True, tools=tools)


@v1.post("/completions")
async def completions(request: Request, s: Served = Depends(served)) -> Response:
    req = await s.prompts.run(parse, CompletionRequest, await _read_body(request, s.limits))
    check_common(req, s.model_id)
    if req.tools:
        raise ApiError(400, "tools are for /v1/chat/completions", param="tools", code="unsupported_parameter")
    if req.echo:
        raise ApiError(400, "echo is not supported", param="echo", code="unsupported_parameter")
    prompt = req.prompt
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        if any(not 0 <= t < s.llm.tokenizer.n_vocab for t in prompt):
            raise ApiError(400, "a prompt token id is outside the vocabulary", param="prompt")
        ids = list(prompt)
    else:
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise ApiError(400, "one prompt per request (n=1)", param="prompt")
            prompt = prompt[0]
        if not prompt:
            raise ApiError(400, "the prompt is empty", param="prompt")
        ids = await s.prompts.run(s.llm.tokenize, prompt, param="prompt")
    return await _answer(request, s, req, ids, req.max_tokens, chat=False)


async def _answer(request: Request, s: Served, req: SamplingFields, ids: list[int], max_tokens: int | None,
                  chat: bool, tools: Tools | None = None) -> Response:
    """Queue the generation; stream its pieces as server-sent events, or answer once it ends."""
    options = _options(s, req, ids, max_tokens, chat)
    if tools is not None or req.response_format is not None:  # compiled off the event loop: it takes a while
        options["grammar"] = await s.prompts.run(s.llm.grammar, None, req.response_format, tools,
                                                 param="tools" if tools else "response_format")
        options["tools"] = tools
    job = Job(ids, options, req.cache_prompt, asyncio.get_running_loop())
    s.worker.submit(job)
    if s.limits.timeout_s:
        job.loop.call_later(s.limits.timeout_s, job.expire)
    reply = Reply(s.model_id, chat, len(ids))
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return _JobStream(_sse(job, reply, include_usage, s.limits), job, media_type="text/event-stream",
                          headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    watcher = asyncio.create_task(_cancel_on_disconnect(request, job))
    try:
        pieces: list[str] = []
        while True:
            kind, value = await job.events.get()
            if kind == "piece":
                pieces.append(value)
            elif kind == "error":
                raise value
            elif job.timed_out:
                raise _timed_out(s.limits)
            else:
                return JSONResponse(reply.whole("".join(pieces), value))
    finally:
        watcher.cancel()
        job.cancel.set()  # no-op once done; stops the model if this handler is cancelled


def _options(s: Served, req: SamplingFields, ids: list[int], max_tokens: int | None, chat: bool) -> dict:
    """The generation's options from the request, within the context and the server's limits."""
    n_ctx, limit = s.llm.backend.n_ctx, s.limits.max_tokens
    if len(ids) >= n_ctx:
        raise ApiError(400, f"the prompt is {len(ids)} tokens; the context holds {n_ctx}",
                       param="messages" if chat else "prompt", code="context_length_exceeded")
    if max_tokens is None:
        max_tokens = min(limit, n_ctx - len(ids))
    elif not 1 <= max_tokens <= limit:
        raise ApiError(400, f"max_tokens must be between 1 and {limit}, not {max_tokens}",
                       param="max_tokens", code="invalid_value")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return dict(max_tokens=max_tokens, temperature=1.0 if req.temperature is None else req.temperature,
                top_p=1.0 if req.top_p is None else req.top_p, top_k=req.top_k or 0,
                seed=None if req.seed == -1 else req.seed, stop=stop)


def _model_card(s: Served) -> dict:
    return {"id": s.model_id, "object": "model", "created": s.created, "owned_by": "edgespec",
            "meta": {"n_ctx": s.llm.backend.n_ctx, "n_vocab": s.llm.tokenizer.n_vocab, "drafter": s.llm.drafter_name}}


async def _read_body(request: Request, limits: Limits) -> bytes:
    too_large = ApiError(413, f"the request body is over {limits.max_body_bytes} bytes", code="body_too_large")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():  # chunked bodies have no length: count as they come
        body += chunk
        if len(body) > limits.max_body_bytes:
            raise too_large
    return bytes(body)


def _timed_out(limits: Limits) -> ApiError:
    return ApiError(504, f"the request took over --timeout {limits.timeout_s:g} s and was stopped",
                    kind="server_error", code="timeout")


async def _sse(job: Job, reply: Reply, include_usage: bool, limits: Limits) -> AsyncIterator[bytes]:
    if reply.chat:
        yield sse_event(reply.chunk(role=True))
    while True:
        items = [await job.events.get()]
        while not job.events.empty():  # what arrived together goes out in one write, not a write per token
            items.append(job.events.get_nowait())
        pieces = [value for kind, value in items if kind == "piece"]
        if pieces:
            yield b"".join(sse_event(reply.chunk(p)) for p in pieces)
        kind, value = items[-1]  # "done" or "error" is always a job's last event
        if kind == "done" and job.timed_out:
            kind, value = "error", _timed_out(limits)
        if kind == "error":  # the status line is sent already: report in the stream, as OpenAI does
            yield sse_event({"error": {"message": value.message, "type": value.kind, "param": None, "code": value.code}})
            break
        if kind == "done":
            if value.tool_calls:
                yield sse_event(reply.chunk(tool_calls=value.tool_calls))
            last = reply.chunk(finish=FINISH.get(value.finish_reason, "stop"))
            last["edgespec"] = value.stats.to_dict()
            yield sse_event(last)
            if include_usage:
                yield sse_event({**reply.head(True), "choices": [], "usage": reply.usage(value)})
            break
    yield b"data: [DONE]\n\n"


class _JobStream(StreamingResponse):
    """A stream that cancels its job however it ends: a client gone mid-stream
    frees the model for the next request (Starlette cancels the body on disconnect)."""

    def __init__(self, content: AsyncIterator[bytes], job: Job, **kw: Any) -> None:
        super().__init__(content, **kw)
        self.job = job

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.cancel.set()


async def _cancel_on_disconnect(request: Request, job: Job) -> None:
    # the body is read: the next ASGI message is the client's disconnect
    while (await request.receive())["type"] != "http.disconnect":
        pass
    job.cancel.set()


class LocalServer:
    """The app on a socket: `run()` serves until interrupted (the CLI); `start()`
    serves from a background thread and `stop()` ends it (an app or a test).
    Port 0 picks a free port; `url` has the real one."""

    def __init__(self, llm: EdgeSpec, model_id: str, host: str = "127.0.0.1", port: int = 8080,
                 limits: Limits | None = None, api_key: str | None = None,
                 cors_origins: list[str] | None = None, allowed_hosts: set[str] = frozenset()) -> None:
        import uvicorn

        self.app = create_app(llm, model_id, limits, api_key, cors_origins, {host, *allowed_hosts})
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as e:
            self.sock.close()
            raise EdgespecError(f"cannot listen on {host}:{port}: {e.strerror}") from None
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.sock.getsockname()[1]}/v1"
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", timeout_graceful_shutdown=2))
        self._thread: threading.Thread | None = None

    def run(self, on_ready: Any = None) -> None:
        """Serve in this thread; `on_ready(url)` is called once requests are accepted."""
        # the event loop shares the GIL with the prompt and model threads: hand it over
        # every millisecond rather than every five, so /health answers while they work
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        if on_ready is not None:
            def announce() -> None:
                while not self.server.started and not self.server.should_exit:
                    time.sleep(0.05)
                if self.server.started:
                    on_ready(self.url)

            threading.Thread(target=announce, daemon=True).start()
        self.server.run(sockets=[self.sock])

    def start(self) -> "LocalServer":
        self._thread = threading.Thread(target=self.run, name="edgespec-server", daemon=True)
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise EdgespecError("the server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
