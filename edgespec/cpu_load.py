"""How many cores other processes kept busy while this one worked.

llama.cpp's threads spin at their barriers, so a program busy on a core they need
slows decoding far more than its own share: on a 2-core VM (Qwen2.5-Coder-1.5B, 2
threads) a program that wanted a quarter of a core got 0.15 of one and decoding lost
9%; one that wanted a whole core got 0.65 and decoding lost 59%. Timings taken then
describe the load, not the machine: a bench's ratios, and a cost curve that would be
cached and price later runs. psutil reads the system's and this process's CPU time
(/proc/stat on Linux), so measuring costs two reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

# An idle machine measures about 0.01 of a core; a load that measures 0.15 already cost
# decoding 9% (above). Below this many cores taken, others are noise.
NOISE_CORES = 0.1
# The clock ticks of /proc/stat (10 ms) make shorter spans too coarse to judge.
MIN_SECONDS = 1.0


@dataclass(frozen=True)
class _Sample:
    wall: float
    others_and_us: float  # CPU seconds of every process, and of the hypervisor's other guests
    us: float


def _sample() -> _Sample:
    t = psutil.cpu_times()
    p = psutil.Process().cpu_times()
    # steal: time this VM's cores wanted to run and the hypervisor gave to another guest
    busy = t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) \
        + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)
    return _Sample(time.perf_counter(), busy, p.user + p.system + p.children_user + p.children_system)


class OtherLoad:
    """Started at creation: `cores()` is the average number of cores other processes
    (not this one nor its children) kept busy since."""

    def __init__(self) -> None:
        self._start = _sample()

    def cores(self) -> float | None:
        """None for spans under MIN_SECONDS: too short to measure."""
        now, start = _sample(), self._start
        wall = now.wall - start.wall
        if wall < MIN_SECONDS:
            return None
        return max(0.0, (now.others_and_us - start.others_and_us - (now.us - start.us)) / wall)


def contends(cores: float | None, threads: int) -> bool:
    """Whether other processes taking `cores` on average left fewer free cores than
    `threads` (None, a span too short to measure: no)."""
    spare = max(0, (psutil.cpu_count() or 1) - threads)
    return cores is not None and cores > spare + NOISE_CORES
