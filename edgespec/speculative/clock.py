"""Another machine's time: what a batch costs where the engine's backend only simulates it.

The FPGA simulation charges each call the board's cycles, and a replay charges it a
recorded curve's price (bench/replay.py). The controller must plan draft lengths from
those costs, not from this machine's clock; an engine given a Clock does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class Clock(ABC):
    """Seconds a batch of n tokens after n_past cached ones takes on the simulated hardware."""

    # its prices are known up front: the engine sets the curve from them and never times,
    # caches or idles; False: it learns each size from the batches it runs, as a new machine
    known: bool = True

    @abstractmethod
    def seconds(self, n: int, n_past: int) -> float:
        """What evaluating n tokens after n_past cached ones costs there."""
