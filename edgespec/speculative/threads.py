"""How many threads a generation computes on, beside other programs.

llama.cpp's threads spin at their barriers: one that shares a core with a busy program loses
far more than that program's share (cpu_load.py). So a backend's threads follow the cores
others leave: measured while the engine sat idle (a chat waiting for its user) or over the
last generation before one starts, and once a second during it, up to the count the backend
was opened with and never above the core count.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from edgespec.speculative.backend import Backend
from edgespec.speculative.cpu_load import MIN_SECONDS, OtherLoad, RecentLoad, contends, fitting_threads


class ThreadFitting:
    """The engine calls `begin` before a generation, `watch` after each step and `end` after
    it. When the backend moves to another count, the `followers` (model drafters' backends)
    move with it and `changed()` runs (the cost curve kept for that count is loaded). `adapt`
    False keeps the count the backend has."""

    def __init__(self, backend: Backend, adapt: bool, followers: Sequence[Backend], changed: Callable[[], None]) -> None:
        self.backend, self._followers, self._changed = backend, list(followers), changed
        opened = backend.n_threads
        # never above the core count: a backend opened with more threads would otherwise be
        # cut at the first decision and reported as crowded out by other programs
        self.most: int | None = min(opened, os.cpu_count() or opened) if adapt and opened else None
        self._idle = RecentLoad() if self.most else None  # others' load before the next generation
        self._ran_beside: tuple[float, int] | None = None  # (others' cores, own threads), latest measured
        self._window: OtherLoad | None = None  # others' load in the current second of a generation

    def contended(self, other_cores: float | None) -> bool:
        """Whether other processes took cores the backend's threads wanted (cpu_load.py)."""
        return contends(other_cores, self.backend.n_threads or os.cpu_count() or 1)

    def quiet(self, load: OtherLoad) -> bool:
        """Whether others left the cores alone over an OtherLoad's span."""
        return not self.contended(load.cores())

    def begin(self) -> int | None:
        """Fit the count to the cores others leave; the count this generation starts on."""
        if self.most:
            idle = self._idle.cores() if self._idle is not None else None
            if self._idle is not None:
                self._idle.close()
            if idle is not None:
                self._set(fitting_threads(idle, self.backend.n_threads, self.most, running=False))
            elif self._ran_beside is not None:
                self._set(fitting_threads(*self._ran_beside, self.most, running=True))
            self._window, self._ran_beside = OtherLoad(), None
        return self.backend.n_threads

    def watch(self) -> None:
        """During a generation, once a second: a program that starts mid-answer gets its core
        as soon as it is measured, and gives it back the same way."""
        w = self._window
        if w is None or w.seconds() < MIN_SECONDS:
            return
        other = w.cores()
        self._window = OtherLoad()
        if other is not None:
            self._ran_beside = (other, self.backend.n_threads)
            self._set(fitting_threads(other, self.backend.n_threads, self.most, running=True))

    def end(self, other_cores: float | None, steady: bool, ended: bool) -> bool:
        """After a generation that others' load `other_cores` ran beside (`steady`: on one
        count throughout); whether it ran on quiet cores, so that its timings describe the
        machine. An abandoned one (`ended` False) starts no thread: it may be collected while
        the interpreter exits, when a thread's start never returns."""
        if self.most:
            if self._ran_beside is None and other_cores is not None and steady:
                self._ran_beside = (other_cores, self.backend.n_threads)
            self._window, self._idle = None, RecentLoad() if ended else None
        return steady and not self.contended(other_cores)

    def close(self) -> None:
        if self._idle is not None:
            self._idle.close()

    def _set(self, n: int) -> None:
        if n != self.backend.n_threads and self.backend.set_threads(n):
            for b in self._followers:
                b.set_threads(n)
            self._changed()
