"""What an engine learns that outlives one generation, and keeps on disk (calibration.py).

The batch-cost curve belongs to the machine, build and thread count; each kind of draft's
greedy acceptance and each model drafter's step cost belong to the models. The next process
starts from what this one learned. Timings taken while other programs took the cores
describe that load, so the engine keeps only what it learned on quiet cores.
"""

from __future__ import annotations

import time
import weakref
from typing import Callable, Sequence

import numpy as np

from edgespec.speculative import calibration
from edgespec.speculative.backend import Backend
from edgespec.speculative.clock import Clock
from edgespec.speculative.controller import DraftController
from edgespec.speculative.cpu_load import OtherLoad
from edgespec.speculative.drafter import Drafter, model_costs
from edgespec.speculative.stats import GenerationStats


class Learned:
    """The engine calls `before` a generation, `after` it, and `threads_changed` when its
    backend moves to another thread count. `keep` False (plain decoding, or a caller that
    wants this process's learning only) reads and writes no curve and no per-kind rates."""

    def __init__(self, backend: Backend, controller: DraftController, drafter: Drafter | None, keep: bool,
                 clock: Clock | None) -> None:
        self.backend, self.controller, self.drafter, self.keep = backend, controller, drafter, keep
        self.known = clock.known if clock is not None else False  # a simulation's prices: never timed or kept
        self._clock = clock
        self.borrowed = False  # the curve in use is another thread count's: not this one's to refine or keep
        self._seeded = False  # the controller has read what earlier processes learned of each kind
        # each model drafter's drafted-token count and seconds over generations that ran on
        # quiet cores: a drafter's own counters keep its whole life, loaded stretches too
        self._quiet_steps: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _cost_key(self) -> str | None:
        try:
            return self.backend.cost_key()
        except OSError:  # the model file went away: nothing to key a curve by
            return None

    # -- the curve ----------------------------------------------------------------

    def time_curve(self, sizes: Sequence[int] | None, repeats: int, warm: bool, fresh: bool,
                   quiet: Callable[[OtherLoad], bool] | None, filler: int) -> dict[int, float]:
        """Engine.calibrate's timing, the backend held: every size, `repeats` times in turn,
        each keeping its median. `quiet(load)` says whether others left the cores alone
        (None: the caller caches the curve)."""
        b, cost = self.backend, self.controller.cost
        base = b.n_past
        if self.known:
            cost.set_timed({n: self._clock.seconds(n, base) for n in sizes or range(1, cost.max_n + 1)})
            return cost.measured
        key = b.cost_key()
        # a cached curve decoding learned may lack sizes it never ran: those are timed too
        cached = sizes is None and not fresh and calibration.load(key, cost) and cost.complete
        if cached:
            self.borrowed = False
        if cached and not warm:
            return cost.measured
        sizes = [n for n in (sizes or range(1, cost.max_n + 1)) if base + n <= b.n_ctx]
        load = OtherLoad() if quiet is not None else None
        # warm-up: first calls pay for allocations and cold caches; on a GPU, each batch
        # size's first call also builds its shader pipelines (lavapipe: seconds), so all of them
        for n in (1, 1, 4) if b.device == "CPU" else (1, *sizes):
            b.eval([filler] * min(n, b.n_ctx - base))
            b.rollback(base)
        if cached:
            return cost.measured
        for _ in range(2):  # once more if the curve is implausible: something else took the cores
            times: dict[int, list[float]] = {}
            for _ in range(max(1, repeats)):
                for n in [*sizes, 1]:  # one token again at the end: the unit all others are compared to
                    times.setdefault(n, []).append(self.time_batch(n, filler, undo_to=base))
            timed = {n: float(np.median(t)) for n, t in times.items()}
            if calibration.plausible(timed):
                break
        cost.set_timed(timed)
        self.borrowed = False
        if load is not None and quiet(load):
            calibration.save(key, cost)
        return cost.measured

    def time_batch(self, n: int, filler: int, undo_to: int) -> float:
        """Seconds of one batch of n `filler` tokens, undone after."""
        t0 = time.perf_counter()
        self.backend.eval([filler] * n)
        seconds = time.perf_counter() - t0
        self.backend.rollback(undo_to)
        return seconds

    def keep_curve(self) -> None:
        """After a generation on quiet cores: keep the curve as decoding refined it, for the
        next process (a curve that drifted keeps only what decoding measured lately)."""
        cost = self.controller.cost
        if cost.drifted():
            cost.relearn()
        if not cost.calibrated or self.borrowed or self.known:
            return
        key = self._cost_key()
        if key is not None:
            calibration.save(key, cost)

    def threads_changed(self) -> None:
        """Batch costs depend on the thread count: the curve cached for the new count is
        loaded; without one, the curve in use goes on (decoding refines it) but is not kept
        as the new count's, and nothing is timed mid-answer. A drafter's step cost is kept
        per thread count too."""
        self._quiet_steps.clear()
        if self.keep:
            key = self._cost_key()
            self.borrowed = key is None or not calibration.load(key, self.controller.cost)

    # -- around a generation --------------------------------------------------------

    def before(self, greedy: bool) -> None:
        """The curve earlier runs on this machine learned, else what this process measured so
        far (nothing is timed: decoding adds each size it runs, the controller prices the
        others); each kind's acceptance as earlier processes kept it (greedy runs only:
        sampled acceptance depends on the temperature)."""
        if not self.keep:
            return
        cost = self.controller.cost
        if self.known:
            if not cost.calibrated:
                self.time_curve(None, 1, warm=False, fresh=False, quiet=None, filler=0)
        elif cost.calibrated and cost.drifted():
            cost.relearn()
        elif not cost.calibrated and not self.borrowed:
            key = self._cost_key()
            if key is not None:
                calibration.load(key, cost)
        path = self.backend.path
        if greedy and not self._seeded and path is not None:
            self._seeded = True
            self.controller.acceptance.seed(calibration.load_kinds(path, model_costs(self.drafter)))

    def drafter_steps(self) -> dict:
        """Each model drafter's (drafted tokens, seconds) now: what `after` measures from."""
        return {c: c.token_cost for c in model_costs(self.drafter)}

    def after(self, st: GenerationStats, quiet: bool, steps_before: dict, greedy: bool) -> None:
        """Keep what this generation taught: on quiet cores the drafters' step costs and the
        curve; greedy, each model drafter's acceptance and every kind's counts."""
        if quiet:
            self._keep_drafter_steps(steps_before)
            if self.keep:
                self.keep_curve()
        counts = self.controller.acceptance.take_counts()
        drafters = model_costs(self.drafter)
        path = self.backend.path
        if greedy and path is not None:
            calibration.save_acceptance(path, drafters, st.by_key)
            if self.keep:
                calibration.save_kinds(path, drafters, counts)

    def _keep_drafter_steps(self, before: dict) -> None:
        """Add this generation's drafted tokens and their seconds to the quiet total, and
        cache each drafter's mean: what the planner weighs drafters by."""
        for c, (n0, s0) in before.items():
            n1, s1 = c.token_cost
            n, s = self._quiet_steps.get(c, (0, 0.0))
            self._quiet_steps[c] = (n + n1 - n0, s + s1 - s0)
        calibration.save_drafter_steps((c, self._quiet_steps[c]) for c in before)
