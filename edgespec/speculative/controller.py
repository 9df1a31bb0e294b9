"""Adaptive draft length: draft only as many tokens as pay off.

Two things are learned online:
- the backend's cost of evaluating a batch of n tokens (seconds), learned from the
  batches decoding runs (or loaded from what earlier runs learned) and refined from
  every verification; a size not yet measured is priced high (`prior_units`), and
  tried now and then where it would pay at the cheapest rows seen (`OPTIMISTIC_ROW`);
- the acceptance rate at each draft position, separately for each kind of
  draft (`Draft.kind`: lookup with a long match is worth more than with one token).

With p_i the chance that draft token i is accepted given the ones before it, k
draft tokens yield E(k) = 1 + sum_{j<=k} prod_{i<=j} p_i tokens per step, at the
cost of one batch of k+1. The controller picks k maximizing E(k)/cost(k+1), and
drafts nothing when no k beats plain decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from edgespec.speculative.drafter import Draft, Kind, ModelCost


def acceptance_counts(ev: object) -> np.ndarray | None:
    """[accepted, tried] per draft position as a 2 x n array, or None if `ev` is not that."""
    try:
        a = np.asarray(ev, dtype=float)
    except (TypeError, ValueError):
        return None
    ok = a.ndim == 2 and a.shape[0] == 2 and np.isfinite(a).all() and (0 <= a[0]).all() and (a[0] <= a[1]).all()
    return a if ok else None


@dataclass
class AcceptanceModel:
    """Per-key, per-position acceptance estimates with a Beta prior and decay.

    The prior of a kind is its long-run rate on this target where earlier runs kept
    one (`seed`), else a flat `prior`: at 0.5 a kind drafts nothing where two tokens
    cost over 1.5x one (E(1) = 1.5) until a probe (greedy: until the text shows what a
    declined draft would have verified, `edgespec.speculative.hindsight`), so a new process, or
    chat's first turn, would decode plainly at first even where the kind has always paid.

    Evidence belongs to one prompt (`new_context`): the same kind is accepted very
    differently in different texts (a 4-token match copies a file under edit for dozens of
    tokens, a summary's source for a few), so what one prompt taught would misprice the next
    one's drafts for ~20 steps. Between prompts it joins the long-run rate each kind
    restarts from."""

    max_k: int
    prior: float = 0.5
    prior_weight: float = 2.0
    decay: float = 0.95  # evidence fades over ~20 steps: a code block, then prose, is followed quickly
    _decayed: dict[Kind, list[np.ndarray]] = field(default_factory=dict)  # this prompt's, fading: `decay`
    _priors: dict[Kind, np.ndarray] = field(default_factory=dict)  # per-position: each kind's long-run rate
    _counts: dict[Kind, list[np.ndarray]] = field(default_factory=dict)  # undecayed, since take_counts
    _long: dict[Kind, list[np.ndarray]] = field(default_factory=dict)  # undecayed: seeded, and this process's
    # E(j) for j = 0..max_k per kind, until its evidence changes: asked several times a
    # step (every proposal auto weighs, then the one verified), changed once at most
    _expected: dict[Kind, np.ndarray] = field(default_factory=dict)

    def _posterior(self, a: np.ndarray, t: np.ndarray) -> np.ndarray:
        # positions never tried borrow the key's pooled rate, not the flat prior:
        # otherwise a key that verified 3 tokens at 90% would look like 50% at
        # position 4 forever, and long drafts (where copying pays) would never be tried
        pooled = (a.sum() + self.prior * self.prior_weight) / (t.sum() + self.prior_weight)
        return (a + pooled * self.prior_weight) / (t + self.prior_weight)

    def rates(self, key: Kind) -> np.ndarray:
        pair, prior = self._decayed.get(key), self._priors.get(key)
        if pair is None:
            return np.full(self.max_k, self.prior) if prior is None else prior
        a, t = pair
        if prior is None:
            return self._posterior(a, t)
        return (a + prior * self.prior_weight) / (t + self.prior_weight)

    def record(self, key: Kind, k: int, n_accepted: int, start: int = 0) -> None:
        """A draft of k tokens of which the first n_accepted were accepted. `start` > 0: its
        first `start` positions were recorded already (verified and accepted), and this is
        the rest of the same draft, decided later by the text."""
        reached = min(n_accepted + 1, k)  # positions actually tested
        if reached <= start:  # none beyond those recorded (a rejection among the verified ones)
            return
        self._expected.pop(key, None)
        decayed = self._pair(self._decayed, key)
        if start == 0:
            for d in decayed:
                d *= self.decay
        for accepted, tried in (decayed, self._pair(self._counts, key), self._pair(self._long, key)):
            tried[start:reached] += 1
            accepted[start:n_accepted] += 1

    def _pair(self, table: dict[Kind, list[np.ndarray]], key: Kind) -> list[np.ndarray]:
        """[accepted, tried] per position of `key` in one of the tables, created at zero on
        first use (not as a setdefault default: record() runs every step)."""
        pair = table.get(key)
        if pair is None:
            pair = table[key] = [np.zeros(self.max_k), np.zeros(self.max_k)]
        return pair

    def take_counts(self) -> dict[str, list[list[float]]]:
        """[accepted, tried] per position of every kind since the last call, undecayed:
        what a run adds to the long-run rates kept for the next process."""
        out = _listed(self._counts)
        self._counts = {}
        return out

    def long_run(self) -> dict[str, list[list[float]]]:
        """[accepted, tried] per position of every kind, undecayed: the seeded counts and
        everything since, from which each prompt's starting rates come."""
        return _listed(self._long)

    def seed(self, counts: dict[str, list[list[float]]]) -> None:
        """Take each kind's [accepted, tried] per position kept by earlier runs (by the
        kind's name) as its prior (weighing `prior_weight` steps, so this run's own
        evidence soon leads)."""
        self._expected.clear()
        for name, ev in counts.items():
            c = acceptance_counts(ev)
            if c is not None:  # else not counts this model wrote
                key = Kind.parse(name)
                a, t = self._pair(self._long, key)
                n = min(self.max_k, c.shape[1])
                a[:n] += c[0, :n]
                t[:n] += c[1, :n]
                self._priors[key] = self._posterior(a, t)

    def new_context(self) -> None:
        """A new prompt: every kind restarts from its long-run rate, which now includes
        what the prompts before this one taught."""
        self._priors = {key: self._posterior(a, t) for key, (a, t) in self._long.items()}
        self._decayed.clear()
        self._expected.clear()

    def expected_tokens(self, key: Kind, k: int) -> list[float]:
        """E(j) for j = 0..k: expected tokens per step when drafting j tokens."""
        e = self._expected.get(key)
        if e is None:
            e = self._expected[key] = _expected(self.rates(key).tolist())
        return e[: k + 1]


def _listed(table: dict[Kind, list[np.ndarray]]) -> dict[str, list[list[float]]]:
    """A table of [accepted, tried] arrays per kind as plain lists by the kind's name (JSON, a seed)."""
    return {str(k): [a.tolist(), t.tolist()] for k, (a, t) in table.items()}


def _expected(rates: list[float]) -> list[float]:
    """E(j) = 1 + sum over i <= j of the chance that the first i are all accepted, for j = 0..len(rates).
    A loop, not numpy's cumprod and cumsum: on 16 rates the calls cost more than the sums."""
    out, reach, total = [1.0], 1.0, 0.0
    for r in rates:
        reach *= r
        total += reach
        out.append(1.0 + total)
    return out


# What a batch of n tokens costs, in units of one token, before this machine measured it:
# at or above the CPU curves measured for the project (docs/design.md), so an unmeasured
# size is drafted only where drafts are long and nearly always accepted, and a loss while
# learning is unlikely.
PRIOR_SECOND_ROW = 0.9
PRIOR_ROW = 0.8
LEARN_AFTER = 3  # observations of a size before its median joins the curve
# The cheapest extra row measured on the project's CPUs (docs/design.md): a size not yet
# measured is tried when it would pay at this price, so that it gets measured at all
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
