"""Token bytes in, text pieces out: whole UTF-8 characters only, and never a piece of a stop
string (text is held back while one may still be forming) or of what a caller keeps hidden
(a tool call's JSON, `shown`)."""

from __future__ import annotations

import codecs
from typing import Callable, Sequence


class TextStream:
    def __init__(self, stop: Sequence[str] = (), shown: Callable[[str], int] | None = None) -> None:
        self.stop = [s for s in stop if s]
        self.text = ""
        self.stopped = False  # a stop string was found; `text` ends before it
        self._shown = shown  # how much of the text so far may be shown
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._hold = max((len(s) for s in self.stop), default=1) - 1
        self._emitted = 0  # characters of `text` already given out

    def push(self, data: bytes) -> str:
        """The next token's bytes; returns the text that may be shown now ("" for none)."""
        self.text += self._decoder.decode(data)
        hit = find_stop(self.text, self.stop, self._emitted)
        if hit is not None:
            self.text, self.stopped = self.text[:hit], True
            return ""
        safe = len(self.text) - self._hold
        return self._emit(safe if self._shown is None else min(safe, self._shown(self.text)))

    def end(self) -> None:
        """The tokens ran out without a stop string: bytes of an unfinished character become U+FFFD."""
        if not self.stopped:
            self.text += self._decoder.decode(b"", final=True)

    def rest(self, text: str | None = None) -> str:
        """What was held back of `text` (the whole answer, or what the caller keeps of it)."""
        self.text = self.text if text is None else text
        return self._emit(len(self.text))

    def _emit(self, upto: int) -> str:
        if upto <= self._emitted:
            return ""
        piece, self._emitted = self.text[self._emitted:upto], upto
        return piece


def find_stop(text: str, stop: Sequence[str], emitted: int) -> int | None:
    """Earliest position where a stop string starts (only new text can hold one)."""
    found = [text.find(s, max(0, emitted - len(s) + 1)) for s in stop]
    return min((i for i in found if i >= 0), default=None)
