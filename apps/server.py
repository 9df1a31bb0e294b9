"""An OpenAI-compatible local server over the public API (`edgespec serve`).

    /v1/models, /v1/chat/completions, /v1/completions (streaming by server-sent
    events), /health

One model, one generation at a time: requests wait in a bounded queue and are
served in turn by a single worker thread that owns the model (as llama-server
does with one slot). A client that goes away, mid-stream or while waiting,
cancels its job, so the model is free for the next request. Every malformed
request gets a 4xx JSON error in OpenAI's shape. Replies carry `usage` and,
in the extension field `edgespec`, the speculation statistics.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Literal, Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from edgespec import EdgeSpec, EdgespecError
from edgespec.api import Completion


@dataclass
class Limits:
    max_body_bytes: int = 1 << 20  # a request body larger than this is refused unread (413)
    max_tokens: int = 4096  # the largest max_tokens a request may ask for
    max_queue: int = 8  # requests waiting behind the running one; more get 503


class ApiError(Exception):
    """An error reply: HTTP status plus OpenAI's error object."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


# -- request bodies (strict: a string where a number belongs is an error, not a guess) --

class _Body(BaseModel):
    # fields we do not use are ignored, as OpenAI's own clients send some (user, metadata)
    model_config = ConfigDict(extra="ignore", strict=True)


class StreamOptions(_Body):
    include_usage: bool = False


class ContentPart(_Body):
    type: str
    text: Optional[str] = None


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[str, list[ContentPart], None] = None


class _Sampling(_Body):
    model: str
    max_tokens: Optional[int] = None
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)  # OpenAI's default is 1
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(None, ge=0)  # llama-server's extension
    seed: Optional[int] = None
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    n: int = 1
    cache_prompt: bool = True  # llama-server's extension: reuse the KV cache of the previous request's prefix
    # what we cannot honour is refused rather than silently ignored
    logprobs: Union[bool, int, None] = None
    logit_bias: Optional[dict[str, float]] = None
    frequency_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    tools: Optional[list[Any]] = None


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = None


class CompletionRequest(_Sampling):
    prompt: Union[str, list[str], list[int]]
    echo: bool = False


# -- the worker that owns the model -------------------------------------------

@dataclass
class Job:
    prompt_ids: list[int]
    options: dict
    cache_prompt: bool
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)  # ("piece", str) ... ("done", Completion) | ("error", ApiError)
    cancel: threading.Event = field(default_factory=threading.Event)

    def put(self, kind: str, value: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the server's loop is gone (shutting down)
            self.cancel.set()


class ModelWorker:
    """A single thread that runs the jobs in turn; the only code that touches the model."""

    def __init__(self, llm: EdgeSpec, max_queue: int) -> None:
        self.llm = llm
        self.jobs: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self.running: Job | None = None
        self.counts = {"completed": 0, "cancelled": 0, "failed": 0}
        self.thread = threading.Thread(target=self._run, name="edgespec-model", daemon=True)
        self.thread.start()

    def submit(self, job: Job) -> None:
        try:
            self.jobs.put_nowait(job)
        except queue.Full:
            raise ApiError(503, f"the server is busy ({self.jobs.maxsize} requests waiting); retry later",
                           kind="server_error", code="queue_full") from None

    def stop(self) -> None:
        if self.running is not None:
            self.running.cancel.set()
        try:
            self.jobs.put_nowait(None)
        except queue.Full:
            pass

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            if job.cancel.is_set():  # its client left while it waited
                self.counts["cancelled"] += 1
                continue
            self.running = job
            try:
                if not job.cache_prompt:
                    self.llm.reset()
                stream = self.llm.stream_ids(job.prompt_ids, cancel=job.cancel, **job.options)
                for piece in stream:
                    job.put("piece", piece)
                assert stream.completion is not None
                self.counts["cancelled" if stream.completion.finish_reason == "cancelled" else "completed"] += 1
                job.put("done", stream.completion)
            except EdgespecError as e:  # the request's fault
                self.counts["failed"] += 1
                job.put("error", ApiError(400, str(e)))
            except Exception as e:  # a bug must not kill the worker: the next request still gets served
                self.counts["failed"] += 1
                job.put("error", ApiError(500, f"internal error: {type(e).__name__}: {e}", kind="server_error"))
            finally:
                self.running = None


# -- the application -----------------------------------------------------------

def create_app(llm: EdgeSpec, model_id: str, limits: Limits | None = None, api_key: str | None = None,
               cors_origins: list[str] | None = None) -> FastAPI:
    """The server's ASGI app; `uvicorn.run(create_app(llm, "name"))` serves it."""
    limits = limits or Limits()
    worker = ModelWorker(llm, limits.max_queue)
    created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        worker.stop()

    app = FastAPI(title="edgespec", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.worker = worker
    if cors_origins:  # closed unless asked: a web page must not drive a local model by default
        app.add_middleware(CORSMiddleware, allow_origins=cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError) -> JSONResponse:
        return e.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return ApiError(e.status_code, str(e.detail), code="not_found" if e.status_code == 404 else None).response()

    def authorize(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            raise ApiError(401, "a valid API key is required (Authorization: Bearer KEY)", code="invalid_api_key")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "busy": worker.running is not None, "queued": worker.jobs.qsize(), **worker.counts}

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        authorize(request)
        return {"object": "list", "data": [_model_card(model_id, created, llm)]}

    @app.get("/v1/models/{name:path}")
    async def model(name: str, request: Request) -> dict:
        authorize(request)
        if name != model_id:
            raise ApiError(404, f"the model {name!r} does not exist; this server has {model_id!r}",
                           param="model", code="model_not_found")
        return _model_card(model_id, created, llm)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        authorize(request)
        req = _parse(ChatRequest, await _read_body(request, limits))
        _check_common(req, model_id)
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": _text(m, i)}
                    for i, m in enumerate(req.messages)]
        try:
            ids = llm.chat_ids(messages)
        except EdgespecError as e:
            raise ApiError(400, str(e), param="messages") from None
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        return await _run(request, req, ids, max_tokens, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        authorize(request)
        req = _parse(CompletionRequest, await _read_body(request, limits))
        _check_common(req, model_id)
        if req.echo:
            raise ApiError(400, "echo is not supported", param="echo", code="unsupported_parameter")
        prompt = req.prompt
        if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
            if any(not 0 <= t < llm.tokenizer.n_vocab for t in prompt):
                raise ApiError(400, "a prompt token id is outside the vocabulary", param="prompt")
            ids = list(prompt)
        else:
            if isinstance(prompt, list):
                if len(prompt) != 1:
                    raise ApiError(400, "one prompt per request (n=1)", param="prompt")
                prompt = prompt[0]
            if not prompt:
                raise ApiError(400, "the prompt is empty", param="prompt")
            ids = llm.tokenize(prompt)
        return await _run(request, req, ids, req.max_tokens, chat=False)

    async def _run(request: Request, req: _Sampling, ids: list[int], max_tokens: int | None, chat: bool) -> Response:
        n_ctx = llm.backend.n_ctx
        if len(ids) >= n_ctx:
            raise ApiError(400, f"the prompt is {len(ids)} tokens; the context holds {n_ctx}",
                           param="messages" if chat else "prompt", code="context_length_exceeded")
        if max_tokens is None:
            max_tokens = min(limits.max_tokens, n_ctx - len(ids))
        elif not 1 <= max_tokens <= limits.max_tokens:
            raise ApiError(400, f"max_tokens must be between 1 and {limits.max_tokens}, not {max_tokens}",
                           param="max_tokens", code="invalid_value")
        stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        options = dict(max_tokens=max_tokens, temperature=1.0 if req.temperature is None else req.temperature,
                       top_p=1.0 if req.top_p is None else req.top_p, top_k=req.top_k or 0, seed=req.seed, stop=stop)
        job = Job(ids, options, req.cache_prompt, asyncio.get_running_loop())
        worker.submit(job)
        reply = _Reply(model_id, chat, len(ids))
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return _JobStream(_sse(job, reply, include_usage), job, media_type="text/event-stream",
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
                else:
                    return JSONResponse(reply.whole("".join(pieces), value))
        finally:
            watcher.cancel()
            job.cancel.set()  # no-op once done; stops the model if this handler is cancelled

    return app


def _model_card(model_id: str, created: int, llm: EdgeSpec) -> dict:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "edgespec",
            "meta": {"n_ctx": llm.backend.n_ctx, "n_vocab": llm.tokenizer.n_vocab, "drafter": llm.drafter_name}}


async def _read_body(request: Request, limits: Limits) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise ApiError(413, f"the request body is over {limits.max_body_bytes} bytes", code="body_too_large")
    body = bytearray()
    async for chunk in request.stream():  # chunked bodies have no length: count as they come
        body += chunk
        if len(body) > limits.max_body_bytes:
            raise ApiError(413, f"the request body is over {limits.max_body_bytes} bytes", code="body_too_large")
    return bytes(body)


def _parse(model: type[BaseModel], body: bytes) -> Any:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(400, f"{where}: {first['msg']}" if where else first["msg"], param=where or None,
                       code="invalid_value") from None


def _check_common(req: _Sampling, model_id: str) -> None:
    if req.model != model_id:
        raise ApiError(404, f"the model {req.model!r} does not exist; this server has {model_id!r}",
                       param="model", code="model_not_found")
    if req.n != 1:
        raise ApiError(400, "n must be 1 (one answer per request)", param="n", code="unsupported_parameter")
    unsupported = [name for name in ("logprobs", "logit_bias", "tools") if getattr(req, name)]
    unsupported += [name for name in ("frequency_penalty", "presence_penalty") if getattr(req, name)]
    if unsupported:
        raise ApiError(400, f"{unsupported[0]} is not supported by this server", param=unsupported[0],
                       code="unsupported_parameter")
    stops = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    if len(stops) > 16:
        raise ApiError(400, "at most 16 stop strings", param="stop")


def _text(m: ChatMessage, i: int) -> str:
    if m.content is None:
        return ""
    if isinstance(m.content, str):
        return m.content
    parts = []
    for part in m.content:
        if part.type != "text" or part.text is None:
            raise ApiError(400, f"only text content is supported (got {part.type!r})",
                           param=f"messages.{i}.content", code="unsupported_content")
        parts.append(part.text)
    return "".join(parts)


_FINISH = {"stop": "stop", "length": "length", "context": "length", "cancelled": "stop"}


@dataclass
class _Reply:
    """Builds OpenAI's reply objects for one request."""

    model: str
    chat: bool
    prompt_tokens: int
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    def _head(self, chunk: bool) -> dict:
        if self.chat:
            obj = "chat.completion.chunk" if chunk else "chat.completion"
            return {"id": f"chatcmpl-{self.id}", "object": obj, "created": self.created, "model": self.model}
        return {"id": f"cmpl-{self.id}", "object": "text_completion", "created": self.created, "model": self.model}

    def usage(self, c: Completion) -> dict:
        n = len(c.token_ids)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": n, "total_tokens": self.prompt_tokens + n}

    def whole(self, text: str, c: Completion) -> dict:
        finish = _FINISH.get(c.finish_reason, "stop")
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                      "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        return {**self._head(False), "choices": [choice], "usage": self.usage(c), "edgespec": c.stats.to_dict()}

    def chunk(self, text: str | None = None, finish: str | None = None, role: bool = False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text is not None else {})
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        return {**self._head(True), "choices": [choice]}


def _event(obj: dict) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


async def _sse(job: Job, reply: _Reply, include_usage: bool) -> AsyncIterator[bytes]:
    if reply.chat:
        yield _event(reply.chunk(role=True))
    while True:
        items = [await job.events.get()]
        while not job.events.empty():  # what arrived together goes out in one write, not a write per token
            items.append(job.events.get_nowait())
        pieces = [value for kind, value in items if kind == "piece"]
        if pieces:
            yield b"".join(_event(reply.chunk(p)) for p in pieces)
        kind, value = items[-1]  # "done" or "error" is always a job's last event
        if kind == "error":  # the status line is sent already: report in the stream, as OpenAI does
            yield _event({"error": {"message": value.message, "type": value.kind, "param": None, "code": value.code}})
            break
        if kind == "done":
            last = reply.chunk(finish=_FINISH.get(value.finish_reason, "stop"))
            last["edgespec"] = value.stats.to_dict()
            yield _event(last)
            if include_usage:
                yield _event({**reply._head(True), "choices": [], "usage": reply.usage(value)})
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
                 cors_origins: list[str] | None = None) -> None:
        import socket

        import uvicorn

        self.app = create_app(llm, model_id, limits, api_key, cors_origins)
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
