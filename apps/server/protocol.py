"""OpenAI's wire format: request bodies (validated strictly), error objects and
reply objects, for /v1/chat/completions and /v1/completions."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edgespec import Completion


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
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[ContentPart], None] = None
    tool_calls: Optional[list[dict[str, Any]]] = None  # an assistant's earlier calls
    tool_call_id: Optional[str] = None  # a tool's answer: to which call


class SamplingFields(_Body):
    model: str
    max_tokens: Optional[int] = None
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)  # OpenAI's default is 1
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(None, ge=0)  # llama-server's extension
    seed: Optional[int] = Field(None, ge=-1, lt=1 << 64)  # -1: a random seed, as llama-server reads it
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
    tools: Optional[list[Any]] = None  # chat only (edgespec/structured/tools.py)
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: bool = True
    response_format: Optional[dict[str, Any]] = None  # text, json_object or json_schema (edgespec/structured/grammar.py)


class ChatRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = None


class CompletionRequest(SamplingFields):
    prompt: Union[str, list[str], list[int]]
    echo: bool = False


def parse(model: type[BaseModel], body: bytes) -> Any:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, "the body nests JSON deeper than this server reads", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(400, f"{where}: {first['msg']}" if where else first["msg"], param=where or None,
                       code="invalid_value") from None


def check_common(req: SamplingFields, model_id: str) -> None:
    if req.model != model_id:
        raise ApiError(404, f"the model {req.model!r} does not exist; this server has {model_id!r}",
                       param="model", code="model_not_found")
    if req.n != 1:
        raise ApiError(400, "n must be 1 (one answer per request)", param="n", code="unsupported_parameter")
    unsupported = [name for name in ("logprobs", "logit_bias") if getattr(req, name)]
    unsupported += [name for name in ("frequency_penalty", "presence_penalty") if getattr(req, name)]
    if unsupported:
        raise ApiError(400, f"{unsupported[0]} is not supported by this server", param=unsupported[0],
                       code="unsupported_parameter")
    stops = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    if len(stops) > 16:
        raise ApiError(400, "at most 16 stop strings", param="stop")


def chat_message(m: ChatMessage, i: int) -> dict:
    """A request's message as the chat template reads it (a developer message is a system one)."""
    out = {"role": "system" if m.role == "developer" else m.role, "content": message_text(m, i)}
    if m.tool_calls:
        out["tool_calls"] = m.tool_calls
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def message_text(m: ChatMessage, i: int) -> str:
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


FINISH = {"stop": "stop", "length": "length", "context": "length", "cancelled": "stop", "tool_calls": "tool_calls"}


@dataclass
class Reply:
    """Builds OpenAI's reply objects for one request."""

    model: str
    chat: bool
    prompt_tokens: int
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    def head(self, chunk: bool) -> dict:
        if self.chat:
            obj = "chat.completion.chunk" if chunk else "chat.completion"
            return {"id": f"chatcmpl-{self.id}", "object": obj, "created": self.created, "model": self.model}
        return {"id": f"cmpl-{self.id}", "object": "text_completion", "created": self.created, "model": self.model}

    def usage(self, c: Completion) -> dict:
        n = len(c.token_ids)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": n, "total_tokens": self.prompt_tokens + n}

    def whole(self, text: str, c: Completion) -> dict:
        finish = FINISH.get(c.finish_reason, "stop")
        if self.chat:
            message = {"role": "assistant", "content": text}
            if c.tool_calls:
                message = {"role": "assistant", "content": text or None, "tool_calls": c.tool_calls}
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        return {**self.head(False), "choices": [choice], "usage": self.usage(c), "edgespec": c.stats.to_dict()}

    def chunk(self, text: str | None = None, finish: str | None = None, role: bool = False,
              tool_calls: list[dict] | None = None) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text is not None else {})
            if tool_calls:  # each whole, in one delta: OpenAI's clients join argument pieces, one piece is fine
                delta = {"tool_calls": [{"index": i, **c} for i, c in enumerate(tool_calls)]}
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        return {**self.head(True), "choices": [choice]}


def sse_event(obj: dict) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


