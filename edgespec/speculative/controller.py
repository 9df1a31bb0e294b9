"""Adaptive draft length: draft only as many tokens as pay off.

From the acceptance learned per kind of draft (acceptance.py) and the batch costs learned
for this machine (cost_curve.py): k draft tokens yield E(k) tokens a step at the cost of
one batch of k+1. The controller picks k maximizing E(k)/cost(k+1), and drafts nothing
when no k beats plain decoding.
"""

from __future__ import annotations

import math

import numpy as np

from edgespec.speculative.acceptance import AcceptanceModel
from edgespec.speculative.cost_curve import CostModel
from edgespec.speculative.drafter import Draft, Kind, ModelCost


# Drafting pays only if its batches cost what the curve says. Timings on a shared core are
# noisy, and a curve measured at one moment can be 25% off at another (docs/design.md),
# which on novel text (chat) decides whether a short draft pays. So every verified draft's
# batch time is compared with the curve's prediction for it, per drafter family, and a
# family whose batches run dear is charged that much more. Decayed at every step, drafting
# or not; the prior counts as this many steps that took as long as predicted.
REALIZED_DECAY = 0.97
REALIZED_PRIOR = 2.0
# A draft's predicted gain is an estimate (acceptance learned over ~20 steps, a curve a few
# percent off at any moment): a draft predicted to gain nothing still pays for every error
# in it. So a draft must be predicted to beat plain decoding by this share to be verified,
# and break-even drafts, which on novel text lose, are declined (docs/design.md).
DRAFT_MARGIN = 0.05
# A probe of a declined model drafter pays its catch-up (up to its window of tokens read)
# before it drafts: one draft for that price would teach one acceptance sample, and the
# next probe pays the catch-up again. So such a probe drafts this many steps in a row, a
# token at least each, and its share of the decoding time is charged for all of them.
PROBE_BURST = 8


class DraftController:
    """Chooses the draft length each step from learned acceptance and cost.

    A draft is verified only if its predicted gain over plain decoding, times its
    family's realization (the curve's prediction of its recent batches' time against the
    time they took), beats plain by `DRAFT_MARGIN`: a drafter whose batches run dear stops
    drafting where drafting pays only narrowly, and drafts again where the text makes it
    pay despite that, or once the shortfall has faded from memory.
    """

    def __init__(self, max_k: int = 16, explore_every: int = 32, max_explore_every: int = 1024,
                 min_k: int = 0, probe_share: float = 0.02) -> None:
        """`min_k` (llama.cpp's --draft-min): verify at least that many tokens a step when a
        drafter offers them, paying or not; to compare drafters' acceptance where adaptive
        drafting would decline. 0 leaves every choice to the measured costs. `probe_share`:
        the share of decoding time a declined model drafter's probes may cost."""
        self.max_k = max_k
        self.min_k = min_k
        self.acceptance = AcceptanceModel(max_k)
        self.cost = CostModel(max_k + 1)
        self.explore_every = explore_every
        self.max_explore_every = max_explore_every
        self.probe_share = probe_share
        self._realized: dict[str, list[float]] = {}  # family -> [seconds taken, predicted], decayed
        self._declined: dict[Kind, int] = {}
        self._interval: dict[Kind, int] = {}  # declined steps between probes, per kind
        self._probing: set[Kind] = set()
        self._burst: dict[Kind, int] = {}  # steps a model drafter's probe still drafts (`draft_length`)
        self.bursting = False  # the last `draft_length` was a probe's: its draft is to be verified

    def realization(self, key: Kind) -> float:
        """The time this family's recent batches were predicted to take, as a share of the
        time they took (1: as predicted; below 1: drafting costs more than the curve says)."""
        r = self._realized.get(key.family)
        if r is None or not self.cost.calibrated:
            return 1.0
        w = REALIZED_PRIOR * self.cost.predict(1)  # steps that took as long as predicted
        return (r[1] + w) / (r[0] + w)

    def _discount(self, key: Kind) -> float:
        """What a draft of this kind is predicted to gain is worth: its family's realization,
        less the margin a draft must clear (`DRAFT_MARGIN`)."""
        return self.realization(key) / (1 + DRAFT_MARGIN)

    def _step_costs(self, k_max: int, draft_seconds: float, per_token_seconds: float,
                    optimistic: bool = False) -> np.ndarray:
        """Seconds of a step drafting j = 0..k_max tokens: the verification batch of
        j + 1, plus, for a model drafter, its catch-up and each drafted token
        (j = 0 asks nothing of the drafter)."""
        batch = self.cost.optimistic_costs() if optimistic else self.cost.costs()
        c = batch[1 : k_max + 2]  # a view: callers only read it
        if per_token_seconds or draft_seconds:  # a model drafter's own time
            c = c + per_token_seconds * np.arange(k_max + 1)
            c[1:] += draft_seconds
        return c

    def choose(self, key: Kind, available: int, draft_seconds: float = 0.0, per_token_seconds: float = 0.0,
               probe_seconds: float = 0.0, explore: bool = True) -> int:
        """How many of `available` tokens of kind `key` to verify (or, for a model
        drafter that pays `draft_seconds` per step and `per_token_seconds` per
        drafted token, to draft). `probe_seconds`: what asking it costs after a pause.
        `explore` False: never probe (the caller learns a declined kind otherwise)."""
        k_max = min(available, self.max_k)
        if k_max <= 0 or not self.cost.calibrated:  # one token's cost first: every price is relative to it
            return 0
        e = self.acceptance.expected_tokens(key, k_max)
        gain = e / self._step_costs(k_max, draft_seconds, per_token_seconds)
        gain[1:] *= self._discount(key)
        k = int(np.argmax(gain))
        k = self._size_to_learn(key, k, e, gain, draft_seconds, per_token_seconds) or k
        if k < self.min_k:
            return min(self.min_k, k_max)
        if k == 0 and explore:
            return self._probe(key, probe_seconds, draft_seconds + per_token_seconds)
        return k

    def _probe(self, key: Kind, probe_seconds: float, drafter_step: float) -> int:
        """Nothing pays on current estimates: test one token now and then so a stale
        estimate can recover. Every failed probe doubles the wait, so probing costs little
        even where a probe is dear. A probe that pays a catch-up (`probe_seconds`: a model
        drafter) drafts `PROBE_BURST` steps, each at worst a rejected row and the drafter's step
        (`drafter_step`: its catch-up and one drafted token), and comes no more often than
        keeps that under `probe_share` of the decoding time."""
        n = self._declined[key] = self._declined.get(key, 0) + 1
        every = self._interval.get(key, self.explore_every)
        costs = self.cost.costs()
        if probe_seconds > 0:
            burst = probe_seconds + PROBE_BURST * (costs[2] - costs[1] + drafter_step)
            every = max(every, math.ceil(burst / (self.probe_share * costs[1])))
        if n < every:
            return 0
        self._declined[key] = 0
        self._probing.add(key)
        if probe_seconds > 0:
            self._burst[key] = PROBE_BURST  # drawn on by `draft_length`, this step first
        return 1

    def draft_length(self, cost: ModelCost | None, available: int) -> int:
        """How many tokens to ask a drafter for, at most `available`: a model drafter pays for
        every token it drafts, so its length is chosen first, from its kind's acceptance and
        its measured `cost` (0: none pays); a model-free one proposes freely and is cut after."""
        if cost is None:
            return available
        k = self.choose(cost.kind, available, cost.sync_seconds, cost.per_token, cost.probe_seconds)
        self.bursting = bool(self._burst.get(cost.kind)) and available > 0
        if self.bursting:  # a probe's burst: a token at least
            self._burst[cost.kind] -= 1
            return max(k, 1)
        return k

    def asked(self, cost: ModelCost | None, draft: Draft) -> None:
        """A model drafter asked for a planned draft offered nothing (it was unsure): as costly
        as a rejected token, so it is learned like one."""
        if cost is not None and not len(draft):
            self.record_nothing(cost.kind)

    def _size_to_learn(self, key: Kind, best: int, e: np.ndarray, gain: np.ndarray, draft_seconds: float,
                       per_token_seconds: float) -> int:
        """The shortest draft longer than the `best` choice whose batch size is not measured
        yet and would beat it if its rows cost `OPTIMISTIC_ROW` (`CostModel.optimistic_costs`);
        0 if none. A size never drafted is never measured, and priced by the pessimistic prior
        it would never be drafted: long drafts would stay out of reach wherever they pay but
        less than the prior demands. Verified `LEARN_AFTER` times, a size joins the curve and
        is priced as measured."""
        k_max = len(e) - 1
        unmeasured = [k for k in range(best + 1, k_max + 1) if not self.cost.knows(k + 1)]
        if not unmeasured:  # the usual case: nothing to price optimistically
            return 0
        hopeful = e / self._step_costs(k_max, draft_seconds, per_token_seconds, optimistic=True)
        hopeful[1:] *= self._discount(key)
        return next((k for k in unmeasured if hopeful[k] > gain[best]), 0)

    def expected_gain(self, key: Kind, available: int, per_token_seconds: float = 0.0) -> float:
        """Best predicted speed-up over plain decoding for a proposal of this kind."""
        k_max = min(available, self.max_k)
        if k_max <= 0 or not self.cost.calibrated:
            return 1.0
        e = self.acceptance.expected_tokens(key, k_max)
        c = self._step_costs(k_max, 0.0, per_token_seconds).tolist()
        realized = self.realization(key)
        # in plain Python: auto asks this of every proposal, every step
        return max([e[0] / c[0] * c[0], *(e[j] / c[j] * c[0] * realized for j in range(1, k_max + 1))])

    def record(self, key: Kind, k: int, n_accepted: int, n_evaluated: int, seconds: float) -> None:
        self._realize(key, k, n_evaluated, seconds)
        self.acceptance.record(key, k, n_accepted)
        self.cost.observe(n_evaluated, seconds)
        self._probed(key, n_accepted > 0)

    def _realize(self, key: Kind, k: int, n_evaluated: int, seconds: float) -> None:
        """Add a verified draft's batch time and its prediction (before the step refines the
        curve) to its family's; every family's fade."""
        for r in self._realized.values():
            r[0] *= REALIZED_DECAY
            r[1] *= REALIZED_DECAY
        if k <= 0 or not self.cost.calibrated or seconds <= 0:
            return
        r = self._realized.setdefault(key.family, [0.0, 0.0])
        r[0] += seconds
        r[1] += float(self.cost.costs()[n_evaluated])

    def record_nothing(self, key: Kind) -> None:
        """A model drafter was asked and proposed nothing (it was unsure): as
        costly as a rejected token, so it is learned like one."""
        self.acceptance.record(key, 1, 0)
        self._probed(key, False)

    def _probed(self, key: Kind, success: bool) -> None:
        if key in self._probing:
            self._probing.discard(key)
            interval = self._interval.get(key, self.explore_every)
            self._interval[key] = self.explore_every if success else min(2 * interval, self.max_explore_every)
