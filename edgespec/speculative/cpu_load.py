"""How many cores other processes kept busy while this one worked, and how many threads
that leaves it.

llama.cpp's threads spin at their barriers, so a program busy on a core they need
slows decoding far more than its own share, and is measured taking less than it wants
(docs/design.md, "Threads beside other programs"). Timings taken then describe the
load, not the machine: a bench's ratios, and a cost curve that would be cached and
price later runs. psutil reads the system's and this process's CPU time
(/proc/stat on Linux), so measuring costs two reads.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

import psutil

# Below this many cores taken, others are noise: an idle machine measures near none, and a
# program measured taking more already slows decoding (docs/design.md).
NOISE_CORES = 0.1
# The clock ticks of /proc/stat (10 ms) make shorter spans too coarse to judge.
MIN_SECONDS = 1.0


@dataclass(frozen=True)
class _Sample:
    wall: float
    others_and_us: float  # CPU seconds of every process, and of the hypervisor's other guests
    us: float


def _sample(own: tuple[int, ...] = ()) -> _Sample:
    t = psutil.cpu_times()
    p = psutil.Process().cpu_times()
    # steal: time this VM's cores wanted to run and the hypervisor gave to another guest
    busy = t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) \
        + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)
    us = p.user + p.system + p.children_user + p.children_system
    for pid in own:
        try:
            c = psutil.Process(pid).cpu_times()
            us += c.user + c.system
        except psutil.Error:  # it ended: what it used since counts as others'
            pass
    return _Sample(time.perf_counter(), busy, us)


class OtherLoad:
    """Started at creation: `cores()` is the average number of cores other processes
    (not this one, its reaped children, nor the running processes `own` names, such as
    the bench's llama-server peers) kept busy since."""

    def __init__(self, own: tuple[int, ...] = ()) -> None:
        self._own = tuple(own)
        self._start = _sample(self._own)

    def seconds(self) -> float:
        """Wall time since the start: no system call, so cheap enough for every step."""
        return time.perf_counter() - self._start.wall

    def cores(self) -> float | None:
        """None for spans under MIN_SECONDS: too short to measure."""
        return _others(self._start, _sample(self._own))


def _others(start: _Sample, now: _Sample) -> float | None:
    """Cores other processes kept busy between two samples (None: too short a span)."""
    wall = now.wall - start.wall
    if wall < MIN_SECONDS:
        return None
    return max(0.0, (now.others_and_us - start.others_and_us - (now.us - start.us)) / wall)


class RecentLoad:
    """Started at creation: `cores()` is the load of other processes over about the last
    `span` seconds, where OtherLoad would average the whole time since. Between two chat
    answers a build that started a moment ago would otherwise be averaged with the quiet
    minutes before it. A daemon thread samples every `period` seconds for `linger` seconds
    at most; after that, or once `close()`d, `cores()` is the average since the start."""

    def __init__(self, span: float = 2.0, period: float = 0.5, linger: float = 300.0) -> None:
        self._start = _sample()
        self._recent: deque[_Sample] = deque([self._start], maxlen=int(span / period) + 1)
        self._stop = threading.Event()
        self._period, self._until = period, self._start.wall + linger
        if sys.is_finalizing():  # no thread starts then: averaged since the start instead
            self._stop.set()
        else:
            threading.Thread(target=self._run, name="edgespec-load", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self._period) and time.perf_counter() < self._until:
            self._recent.append(_sample())
        self._stop.set()

    def cores(self) -> float | None:
        """None for spans under MIN_SECONDS: too short to measure."""
        now = _sample()
        oldest = self._start if self._stop.is_set() else self._recent[0]
        return _others(oldest if now.wall - oldest.wall >= MIN_SECONDS else self._start, now)

    def close(self) -> None:
        self._stop.set()


def contends(cores: float | None, threads: int) -> bool:
    """Whether other processes taking `cores` on average left fewer free cores than
    `threads` (None, a span too short to measure: no)."""
    spare = max(0, (psutil.cpu_count() or 1) - threads)
    return cores is not None and cores > spare + NOISE_CORES


# Others' load measured while this process's threads ran on their cores reads low, about
# half: the spinning threads keep them from the time they want (docs/design.md).
SHARED_READS = 0.5
# A core is left to others once they want this much of it: one thread fewer ties from
# about half a core on and pays from three quarters (docs/design.md).
GIVE_UP = 0.75


def fitting_threads(other: float, threads: int, most: int, running: bool) -> int:
    """How many threads to compute on, at most `most`, where other processes kept `other`
    cores busy while this one ran on `threads` (`running`) or sat idle."""
    cores = psutil.cpu_count() or 1
    spare = max(0, cores - threads) if running else cores
    wanted = min(other, spare) + max(0.0, other - spare) / SHARED_READS
    return max(1, min(most, cores - int(wanted + 1 - GIVE_UP)))
