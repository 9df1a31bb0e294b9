"""The batch-cost curve, timed while the engine waits for work.

Nothing is timed before an answer (the first one must not wait), and decoding measures
only the sizes it drafts, so a size it never ran stays priced by the controller's prior,
and a long draft, priced so, is seldom drafted: the sizes where copying pays most are the
ones a new machine never learns. A loaded model that computes nothing (a chat waiting for
its user, a server between requests, an app between calls) has the cores to itself, so
that is when the sizes the curve lacks, and those not timed lately, are timed: one batch
at a time, each taking the backend only when no answer waits for it, so an answer waits at
most one batch. Timings taken while other programs kept the cores busy describe them, not
the machine, and are dropped; while they keep them busy, nothing is timed.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Callable, Iterator

from edgespec.speculative.cost_curve import CostModel
from edgespec.speculative.cpu_load import MIN_SECONDS, OtherLoad

SETTLE_S = 1.0  # after an answer, before timing: a chat's next turn or a server's next request often follows at once
BURST_S = 2.0  # batches timed between two readings of other programs' load
REFRESH_S = 600.0  # a size timed this long ago is timed again: machines and builds drift
RETRY_S = 5.0  # while other programs keep the cores busy, how often to look again


class BackendGate:
    """Who computes on a backend: one generation at a time, and idle timing only while
    no generation runs or waits (engines sharing a backend share its gate)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # a thread holding a paused generation may still reset
        self._count = threading.Lock()  # guards _waiting: generations may wait in several threads
        self._waiting = 0
        self._busy = False
        self._released = time.monotonic()  # when the last generation ended

    @contextmanager
    def generation(self) -> Iterator[None]:
        """Hold the backend for a generation; idle timing stops at its next batch."""
        with self._count:
            self._waiting += 1
        try:
            self._lock.acquire()
        finally:
            with self._count:
                self._waiting -= 1
        self._busy = True
        try:
            yield
        finally:
            self._busy, self._released = False, time.monotonic()
            self._lock.release()

    @contextmanager
    def spare(self) -> Iterator[bool]:
        """Hold the backend for one batch of idle timing if no generation holds it or waits
        for it (True), else hold nothing (False)."""
        got = not self._waiting and self._lock.acquire(blocking=False)
        try:
            yield got and not self._waiting
        finally:
            if got:
                self._lock.release()

    def idle_for(self) -> float:
        """Seconds since the last generation ended (0 while one runs)."""
        return 0.0 if self._busy or self._waiting else time.monotonic() - self._released


_gates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_gates_lock = threading.Lock()


def gate_of(backend: object) -> BackendGate:
    """The one gate of `backend`, created on first use."""
    with _gates_lock:
        gate = _gates.get(backend)
        if gate is None:
            gate = _gates[backend] = BackendGate()
        return gate


class IdleTiming:
    """Times the sizes a curve lacks, or has not timed for `REFRESH_S`, once the backend has
    been idle `SETTLE_S`: started by `wake()` (after an answer), stopped by `close()`.

    `time_batch(n)` evaluates n tokens on the backend and undoes them (seconds; None when it
    cannot now: no room in the context, or no curve of its own to refine); `room()` is the
    largest batch the context has room for; `quiet(load)` says whether other programs left
    the cores alone over an OtherLoad's span; `keep()` stores the curve. All but `room` run
    with the backend held, as does every change to `cost`."""

    def __init__(self, gate: BackendGate, cost: CostModel, time_batch: Callable[[int], float | None],
                 room: Callable[[], int], quiet: Callable[[OtherLoad], bool], keep: Callable[[], None]) -> None:
        self.gate, self.cost = gate, cost
        # held weakly: the engine owns this timing, not the other way round, so an engine
        # dropped unclosed is freed, and its timing with it
        self._time_batch, self._room, self._quiet, self._keep = map(_weakly, (time_batch, room, quiet, keep))
        self._timed_at: dict[int, float] = {}  # size -> when idle timing last measured it
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.batches = 0  # batches timed and kept

    def wake(self) -> None:
        """An answer just ended: time what is due once the backend has been idle a while."""
        if self._stop.is_set():
            return
        if self._thread is None:
            # the thread holds the timing weakly: an engine dropped unclosed stops its timing
            self._thread = threading.Thread(target=_run, args=(weakref.ref(self), self._wake, self._stop),
                                            name="edgespec-idle-timing", daemon=True)
            _running.add(self)
            weakref.finalize(self, _stopped, self._wake, self._stop)
            self._thread.start()
        self._wake.set()

    def close(self) -> None:
        """Stop; returns once no batch of ours is on the backend."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def due(self) -> list[int]:
        """Sizes to time now: those the curve lacks, else those not timed for REFRESH_S
        (every size, the first time), that the context has room for."""
        now, room = time.monotonic(), self._room()
        sizes = range(1, min(self.cost.max_n, room) + 1)
        lacking = [n for n in sizes if not self.cost.knows(n)]
        return lacking or [n for n in sizes if now - self._timed_at.get(n, -REFRESH_S) >= REFRESH_S]

    def step(self) -> tuple[bool, float | None]:
        """One turn of the timing thread: time a burst if something is due and the backend
        has been idle long enough. Returns whether to wait for a wake-up (an answer's end),
        and for how long at most (None: however long)."""
        self._wake.clear()
        if not self.due():
            return True, self._until_due()
        settle = SETTLE_S - self.gate.idle_for()
        if settle > 0:
            return False, settle
        return False, 0.0 if self._burst() else RETRY_S

    def _until_due(self) -> float | None:
        """Seconds until a size timed before falls due again (None: until woken)."""
        return max(0.0, min(self._timed_at.values()) + REFRESH_S - time.monotonic()) if self._timed_at else None

    def _burst(self) -> bool:
        """Time due sizes for about BURST_S, each after one token (the unit it is compared
        with); keep the timings if other programs left the cores alone meanwhile. False
        when they did not, or an answer took the backend first."""
        load = OtherLoad()
        timings: list[tuple[int, float]] = []
        for n in self.due():
            pair = [(m, self._one(m)) for m in ((1, n) if n > 1 else (1,))]
            if any(s is None for _, s in pair):
                break
            timings += pair
            if load.seconds() >= BURST_S or self._stop.is_set():
                break
        if load.seconds() < MIN_SECONDS:  # too short a span to read others' load: wait it out
            self._stop.wait(MIN_SECONDS - load.seconds())
        if not timings or self._stop.is_set() or not self._quiet(load):
            return False
        with self.gate.spare() as free:  # the curve is the engine's: changed only between its generations
            if not free:
                return False
            now = time.monotonic()
            for n, seconds in timings:
                self.cost.observe(n, seconds)
                self._timed_at[n] = now
            self.batches += len(timings)
            self._keep()
        return True

    def _one(self, n: int) -> float | None:
        """Seconds of one batch of n tokens on the spare backend; None when it was not spare."""
        with self.gate.spare() as free:
            return self._time_batch(n) if free and not self._stop.is_set() else None


def _run(ref: "weakref.ref[IdleTiming]", wake: threading.Event, stop: threading.Event) -> None:
    """The timing thread: turns until stopped, or its engine is gone."""
    while not stop.is_set():
        timing = ref()
        if timing is None:
            return
        try:
            woken, wait = timing.step()
        except Exception:  # the backend failed or went away: timing at idle is a nicety, not a duty
            timing.close()
            return
        del timing
        if woken:
            wake.wait(wait)
        elif wait:
            stop.wait(wait)


def _stopped(wake: threading.Event, stop: threading.Event) -> None:
    stop.set()
    wake.set()


def _weakly(f: Callable) -> Callable:
    """`f`, not keeping its object alive (a function as it is); once the object is gone
    calls return None."""
    if not hasattr(f, "__self__"):
        return f
    method = weakref.WeakMethod(f)

    def call(*args):
        m = method()
        return None if m is None else m(*args)
    return call


_running: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """At exit, no batch may still run on a backend the interpreter is about to free."""
    for timing in list(_running):
        timing.close()
