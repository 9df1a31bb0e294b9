"""Adaptive draft length: draft only as many tokens as pay off.

Two things are learned online:
- the backend's cost of evaluating a batch of n tokens (seconds), calibrated at
  start-up on a few batch sizes and refined from every verification;
- the acceptance rate at each draft position, separately for each kind of
  draft (`Draft.key`: lookup with a long match is worth more than with one token).

With p_i the chance that draft token i is accepted given the ones before it, k
draft tokens yield E(k) = 1 + sum_{j<=k} prod_{i<=j} p_i tokens per step, at the
cost of one batch of k+1. The controller picks k maximizing E(k)/cost(k+1), and
drafts nothing when no k beats plain decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


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
    declined draft would have verified, `edgespec.hindsight`), so a new process, or
    chat's first turn, would decode plainly at first even where the kind has always paid."""

    max_k: int
    prior: float = 0.5
    prior_weight: float = 2.0
    decay: float = 0.95  # evidence fades over ~20 steps: a code block, then prose, is followed quickly
    _acc: dict[str, np.ndarray] = field(default_factory=dict)
    _tries: dict[str, np.ndarray] = field(default_factory=dict)
    _priors: dict[str, np.ndarray] = field(default_factory=dict)  # per-position priors from earlier runs
    _counts: dict[str, list[np.ndarray]] = field(default_factory=dict)  # undecayed, since take_counts

    def _posterior(self, a: np.ndarray, t: np.ndarray) -> np.ndarray:
        # positions never tried borrow the key's pooled rate, not the flat prior:
        # otherwise a key that verified 3 tokens at 90% would look like 50% at
        # position 4 forever, and long drafts (where copying pays) would never be tried
        pooled = (a.sum() + self.prior * self.prior_weight) / (t.sum() + self.prior_weight)
        return (a + pooled * self.prior_weight) / (t + self.prior_weight)

    def rates(self, key: str) -> np.ndarray:
        a, prior = self._acc.get(key), self._priors.get(key)
        if a is None:
            return np.full(self.max_k, self.prior) if prior is None else prior
        t = self._tries[key]
        if prior is None:
            return self._posterior(a, t)
        return (a + prior * self.prior_weight) / (t + self.prior_weight)

    def record(self, key: str, k: int, n_accepted: int) -> None:
        if k <= 0:
            return
        if key not in self._acc:
            self._acc[key] = np.zeros(self.max_k)
            self._tries[key] = np.zeros(self.max_k)
        a, t = self._acc[key], self._tries[key]
        a *= self.decay
        t *= self.decay
        reached = min(n_accepted + 1, k)  # positions actually tested
        t[:reached] += 1
        a[:n_accepted] += 1
        ca, ct = self._counts.setdefault(key, [np.zeros(self.max_k), np.zeros(self.max_k)])
        ct[:reached] += 1
        ca[:n_accepted] += 1

    def take_counts(self) -> dict[str, list[list[float]]]:
        """[accepted, tried] per position of every kind since the last call, undecayed:
        what a run adds to the long-run rates kept for the next process."""
        out = {k: [a.tolist(), t.tolist()] for k, (a, t) in self._counts.items()}
        self._counts = {}
        return out

    def seed(self, counts: dict[str, list[list[float]]]) -> None:
        """Take each kind's [accepted, tried] per position kept by earlier runs as its
        prior (weighing `prior_weight` steps, so this run's own evidence soon leads)."""
        for key, ev in counts.items():
            c = acceptance_counts(ev)
            if c is not None:  # else not counts this model wrote
                a, t = np.zeros(self.max_k), np.zeros(self.max_k)
                n = min(self.max_k, c.shape[1])
                a[:n], t[:n] = c[0, :n], c[1, :n]
                self._priors[key] = self._posterior(a, t)

    def expected_tokens(self, key: str, k: int) -> np.ndarray:
        """E(j) for j = 0..k: expected tokens per step when drafting j tokens."""
        p = self.rates(key)[:k]
        return 1.0 + np.concatenate([[0.0], np.cumsum(np.cumprod(p))])


@dataclass
class CostModel:
    """Seconds to evaluate a batch of n tokens, for n = 1..max_n: the curve timed
    at calibration (every size at one moment), times the machine's current speed,
    times a slow correction per size.

    Draft lengths are chosen by the ratios between sizes, so those must not be
    made of timings from different moments. Refining each size on its own did
    that: one 2-token step that stalled (a page fault, a burst on a shared core)
    made drafting look dear, and as a size that is not drafted is not observed
    again, the stale ratio stopped speculation for the rest of a run; a 1-token
    cost left high by the same accident made it look cheap. Here every
    observation moves the shared speed; a size's own correction learns only what
    persists (decoding's real ratios against calibration's), and no single step
    moves either by more than a factor of two.
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
    _cache: np.ndarray | None = None

    def set_timed(self, seconds: dict[int, float]) -> None:
        """A curve timed at one moment (a calibration, or one loaded from disk)."""
        self.reset()
        self._t = {int(n): float(s) for n, s in seconds.items() if s > 0}

    def predict(self, n: int) -> float:
        return self._t[n] * math.exp(self._speed + self._adj.get(n, 0.0))

    def observe(self, n: int, seconds: float) -> None:
        self._cache = None
        if n not in self._t:  # a size never timed joins the curve at the current speed
            if seconds > 0:
                self._t[n] = seconds / math.exp(self._speed)
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
        that draft lengths are chosen by are wrong: every size should be timed again."""
        return any(self._seen.get(n, 0) >= self.drift_after and abs(s / self._t[n] - 1) > self.drift
                   for n, s in self._recent.items())

    def reset(self) -> None:
        self._t, self._adj, self._recent, self._seen = {}, {}, {}, {}
        self._speed, self._cache = 0.0, None

    @property
    def measured(self) -> dict[int, float]:
        """The curve as decoding refined it: what the next run starts from."""
        return {n: self.predict(n) for n in self._t}

    @property
    def calibrated(self) -> bool:
        return 1 in self._t

    def costs(self) -> np.ndarray:
        """cost[n] for n = 0..max_n (cost[0] unused), interpolated between measured sizes."""
        if self._cache is None:
            self._cache = self._interpolate()
        return self._cache

    def _interpolate(self) -> np.ndarray:
        known = sorted(self._t)
        if not known:
            base = np.arange(self.max_n + 1, dtype=float)
            return 1.0 + 0.15 * np.maximum(base - 1, 0)  # a prior in units of one token
        xs = np.array(known, dtype=float)
        ys = np.array([self.predict(n) for n in known])
        n = np.arange(self.max_n + 1, dtype=float)
        out = np.interp(n, xs, ys)
        if len(xs) >= 2 and n[-1] > xs[-1]:  # extrapolate beyond the largest measured batch
            slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
            out = np.where(n > xs[-1], ys[-1] + slope * (n - xs[-1]), out)
        return out


class DraftController:
    """Chooses the draft length each step from learned acceptance and cost."""

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
        self._declined: dict[str, int] = {}
        self._interval: dict[str, int] = {}  # declined steps between probes, per kind
        self._probing: set[str] = set()

    def _step_costs(self, k_max: int, draft_seconds: float, per_token_seconds: float) -> np.ndarray:
        """Seconds of a step drafting j = 0..k_max tokens: the verification batch of
        j + 1, plus, for a model drafter, its catch-up and each drafted token
        (j = 0 asks nothing of the drafter)."""
        c = self.cost.costs()[1 : k_max + 2] + per_token_seconds * np.arange(k_max + 1)
        c[1:] += draft_seconds
        return c

    def choose(self, key: str, available: int, draft_seconds: float = 0.0, per_token_seconds: float = 0.0,
               probe_seconds: float = 0.0, explore: bool = True) -> int:
        """How many of `available` tokens of kind `key` to verify (or, for a model
        drafter that pays `draft_seconds` per step and `per_token_seconds` per
        drafted token, to draft). `probe_seconds`: what asking it costs after a pause.
        `explore` False: never probe (the caller learns a declined kind otherwise)."""
        k_max = min(available, self.max_k)
        if k_max <= 0:
            return 0
        e = self.acceptance.expected_tokens(key, k_max)
        k = int(np.argmax(e / self._step_costs(k_max, draft_seconds, per_token_seconds)))
        if k < self.min_k:
            return min(self.min_k, k_max)
        if k == 0 and explore:
            # nothing pays on current estimates; test one token now and then so a
            # stale estimate can recover. Every failed probe doubles the wait, so
            # probing costs little even where a probe is dear (a model drafter's catch-up).
            # A probe that costs many target steps comes no more often than keeps failed
            # probes under `probe_share` of the decoding time
            n = self._declined[key] = self._declined.get(key, 0) + 1
            every = self._interval.get(key, self.explore_every)
            if probe_seconds > 0:
                every = max(every, math.ceil(probe_seconds / (self.probe_share * self.cost.costs()[1])))
            if n >= every:
                self._declined[key] = 0
                self._probing.add(key)
                return 1
        return k

    def expected_gain(self, key: str, available: int, per_token_seconds: float = 0.0) -> float:
        """Best predicted speed-up over plain decoding for a proposal of this kind."""
        k_max = min(available, self.max_k)
        if k_max <= 0:
            return 1.0
        e = self.acceptance.expected_tokens(key, k_max)
        c = self._step_costs(k_max, 0.0, per_token_seconds)
        return float(np.max(e / c) * c[0])

    def record(self, key: str, k: int, n_accepted: int, n_evaluated: int, seconds: float) -> None:
        self.acceptance.record(key, k, n_accepted)
        self.cost.observe(n_evaluated, seconds)
        self._probed(key, n_accepted > 0)

    def record_nothing(self, key: str) -> None:
        """A model drafter was asked and proposed nothing (it was unsure): as
        costly as a rejected token, so it is learned like one."""
        self.acceptance.record(key, 1, 0)
        self._probed(key, False)

    def _probed(self, key: str, success: bool) -> None:
        if key in self._probing:
            self._probing.discard(key)
            interval = self._interval.get(key, self.explore_every)
            self._interval[key] = self.explore_every if success else min(2 * interval, self.max_explore_every)
