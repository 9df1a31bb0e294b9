"""The cost curve: what evaluating a batch of n tokens costs on this machine, learned from
the batches decoding runs (or loaded from what earlier runs learned) and refined from every
verification; a size not yet measured is priced high (`prior_units`), and tried now and then
where it would pay at the cheapest rows seen (`OPTIMISTIC_ROW`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


# What a batch of n tokens costs, in units of one token, before this machine measured it:
# at or above the CPU curves measured for the project (docs/design.md), so an unmeasured
# size is drafted only where drafts are long and nearly always accepted, and a loss while
# learning is unlikely.
PRIOR_SECOND_ROW = 0.9
PRIOR_ROW = 0.8
LEARN_AFTER = 3  # observations of a size before its median joins the curve
# A hopeful price of an extra row, between what llama.cpp's own kernels and the small-batch
# kernels cost on the project's CPUs (docs/design.md): a size not yet measured is tried when
# it would pay at this price, so that it gets measured at all; the planner ranks drafters at it
# before anything is measured
OPTIMISTIC_ROW = 0.4


def prior_units(n: int) -> float:
    """A pessimistic cost of an n-token batch in units of one token (see PRIOR_ROW)."""
    return 1.0 if n <= 1 else 1.0 + PRIOR_SECOND_ROW + PRIOR_ROW * (n - 2)


@dataclass
class CostModel:
    """Seconds to evaluate a batch of n tokens, for n = 1..max_n: the curve timed
    at calibration (every size at one moment), times the machine's current speed,
    times a slow correction per size.

    Draft lengths are chosen by the ratios between sizes, so those must not be made
    of timings from different moments (docs/design.md): every observation moves the
    shared speed; a size's own correction learns only what persists (decoding's real
    ratios against calibration's), and no single step moves either by more than a
    factor of two.

    A size joins the curve once decoding ran it LEARN_AFTER times (their median);
    until then it is priced no lower than `prior_units` allows from the nearest
    measured size below, and no higher than the nearest measured size above.
    """

    max_n: int
    alpha: float = 0.2  # weight of an observation in the speed; its size's correction takes alpha / 4 of the rest
    clip: float = math.log(2.0)  # one observation counts as at most twice (or half) the prediction
    drift: float = 0.3  # a size this far from its timed cost makes the whole curve suspect
    drift_after: int = 4  # observations of a size before its drift counts
    _t: dict[int, float] = field(default_factory=dict)  # the timed curve
    _speed: float = 0.0  # log factor on the whole curve since it was timed
    _adj: dict[int, float] = field(default_factory=dict)  # log correction of one size
    _recent: dict[int, float] = field(default_factory=dict)  # unclipped average seconds per size, for drift
    _seen: dict[int, int] = field(default_factory=dict)  # observations per size since timed
    _learning: dict[int, list[float]] = field(default_factory=dict)  # a new size's observations, at speed 0
    _cache: np.ndarray | None = None
    _optimistic: np.ndarray | None = None

    def set_timed(self, seconds: dict[int, float]) -> None:
        """A curve timed at one moment (a calibration, or one loaded from disk)."""
        self.reset()
        self._t = {int(n): float(s) for n, s in seconds.items() if s > 0}

    def predict(self, n: int) -> float:
        return self._t[n] * math.exp(self._speed + self._adj.get(n, 0.0))

    def observe(self, n: int, seconds: float) -> None:
        self._cache = self._optimistic = None
        if n not in self._t:  # a new size joins the curve at the current speed, once seen enough
            if seconds > 0:
                seen = self._learning.setdefault(n, [])
                seen.append(seconds / math.exp(self._speed))
                if len(seen) >= LEARN_AFTER:
                    self._t[n] = float(np.median(seen))
                    del self._learning[n]
            return
        self._seen[n] = self._seen.get(n, 0) + 1
        old = self._recent.get(n)
        self._recent[n] = seconds if old is None else (1 - self.alpha) * old + self.alpha * seconds
        if seconds <= 0:
            return
        r = min(max(math.log(seconds / self.predict(n)), -self.clip), self.clip)
        self._speed += self.alpha * r
        self._adj[n] = self._adj.get(n, 0.0) + self.alpha / 4 * (1 - self.alpha) * r
        # the corrections say how the sizes decoding uses differ from each other: their
        # average (weighted by use) belongs to the speed, or a run that verifies one size
        # only would bend its ratio to the sizes it never uses
        mean = sum(self._seen[m] * a for m, a in self._adj.items()) / sum(self._seen[m] for m in self._adj)
        self._speed += mean
        for m in self._adj:
            self._adj[m] -= mean

    def mark_timed(self) -> None:
        """Every size has just been timed (or loaded): later drift is measured from here."""
        self.set_timed(self.measured)

    def drifted(self) -> bool:
        """Decoding refines only the sizes it uses; when one of them has moved far from
        where it was timed (a calibration under a passing load, a machine that changed
        since), the sizes it does not use are as stale, and the ratios between them
        that draft lengths are chosen by are wrong: every size should be learned again."""
        return any(self._seen.get(n, 0) >= self.drift_after and abs(s / self._t[n] - 1) > self.drift
                   for n, s in self._recent.items())

    def relearn(self) -> None:
        """After a drift: keep the sizes decoding measured lately, at what it measured,
        and learn the others again from decoding instead of trusting their stale timing."""
        kept = {n: s for n, s in self._recent.items() if self._seen.get(n, 0) >= self.drift_after and s > 0}
        if 1 not in kept and 1 in self._t:
            kept[1] = self.predict(1)
        self.set_timed(kept)

    def reset(self) -> None:
        self._t, self._adj, self._recent, self._seen, self._learning = {}, {}, {}, {}, {}
        self._speed, self._cache, self._optimistic = 0.0, None, None

    @property
    def measured(self) -> dict[int, float]:
        """The curve as decoding refined it: what the next run starts from."""
        return {n: self.predict(n) for n in self._t}

    def knows(self, n: int) -> bool:
        """A batch of n tokens is measured (else priced by a prior)."""
        return n in self._t

    @property
    def calibrated(self) -> bool:
        """One token's cost is known: every other size can be priced against it."""
        return 1 in self._t

    @property
    def complete(self) -> bool:
        """Every size up to max_n is measured: nothing is priced by the prior."""
        return len(self._t) >= self.max_n and all(n in self._t for n in range(1, self.max_n + 1))

    def costs(self) -> np.ndarray:
        """cost[n] for n = 0..max_n (cost[0] unused), interpolated between measured sizes."""
        if self._cache is None:
            self._cache = self._interpolate([prior_units(n) for n in range(self.max_n + 1)])
        return self._cache

    def optimistic_costs(self) -> np.ndarray:
        """costs(), with every unmeasured size priced at `OPTIMISTIC_ROW` per extra row, from
        the nearest measured size below or from one token, whichever is cheaper: llama.cpp's
        kernels change at some sizes, so the step a measured size took says nothing of the
        sizes above it (16 tokens can cost less than 9)."""
        if self._optimistic is None and self.complete:  # nothing unmeasured to be optimistic about
            self._optimistic = self.costs()
        if self._optimistic is None:
            rows = [1.0 + max(0, n - 1) * OPTIMISTIC_ROW for n in range(self.max_n + 1)]
            out = self._interpolate(rows)
            if self.calibrated:
                one = out[1]
                for n in range(2, self.max_n + 1):
                    if n not in self._t:
                        out[n] = min(out[n], one * rows[n])
            self._optimistic = out
        return self._optimistic

    def _interpolate(self, prior: list[float]) -> np.ndarray:
        """Measured sizes as they are; a size between two measured ones costs what the
        larger does, unless the prior from the smaller one says less; one beyond the
        largest measured one costs that one plus the prior's rows. Without one token's
        cost, the prior alone (in units of one token).
        In plain Python: it runs every step, on 17 sizes, where numpy's calls cost more
        than the arithmetic."""
        if not self.calibrated:
            return np.array(prior)
        measured = {n: self.predict(n) for n in sorted(self._t)}
        out = [0.0] * (self.max_n + 1)
        below = 1
        for n in range(1, self.max_n + 1):
            if n in measured:
                out[n], below = measured[n], n
                continue
            bound = out[below] + out[1] * (prior[n] - prior[below])
            above = next((m for m in measured if m > n), None)
            out[n] = bound if above is None else min(bound, measured[above])
        out[0] = out[1]
        return np.array(out)
