"""What a generation gives its caller: a `Completion` when it has ended, a `Stream` of text
pieces meanwhile (cancellable from any thread)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

from edgespec.speculative.stats import GenerationStats


@dataclass
class Completion:
    text: str
    prompt_ids: list[int]
    token_ids: list[int]
    finish_reason: str
    stats: GenerationStats
    structured: bool = False  # held to JSON (json_schema, response_format)
    tool_calls: list[dict] = field(default_factory=list)  # OpenAI's, when tools were offered and called

    @property
    def parsed(self) -> Any:
        """The answer's JSON value, when JSON was asked for and the answer ran to its end or the
        limit came and the grammar closed it; else None."""
        if not self.structured or not (self.finish_reason == "stop" or self.stats.closed):
            return None
        return json.loads(self.text)

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "prompt_ids": self.prompt_ids,
            "token_ids": self.token_ids,
            "finish_reason": self.finish_reason,
            "tool_calls": self.tool_calls,
            "stats": self.stats.to_dict(),
        }


@dataclass
class Stream:
    """An iterator of text pieces, each made of whole UTF-8 characters.

    `cancel()` may be called from any thread; the generation stops after the
    current step. After iteration, `completion` holds the full result.
    """

    _pieces: Iterator[str]
    _cancel: threading.Event
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    completion: Completion | None = None

    def __iter__(self) -> Iterator[str]:
        return self._pieces

    def __next__(self) -> str:
        return next(self._pieces)

    def cancel(self) -> None:
        self._cancel.set()
