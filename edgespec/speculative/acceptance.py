"""Acceptance, learned online: the chance that each draft position is accepted, for each
kind of draft (`Draft.kind`: lookup with a long match is worth more than with one token).

With p_i the chance that draft token i is accepted given the ones before it, k draft
tokens yield E(k) = 1 + sum_{j<=k} prod_{i<=j} p_i tokens per step (`expected_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgespec.speculative.drafter import Kind


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
            e = self._expected[key] = tokens_per_step(self.rates(key).tolist())
        return e[: k + 1]


def _listed(table: dict[Kind, list[np.ndarray]]) -> dict[str, list[list[float]]]:
    """A table of [accepted, tried] arrays per kind as plain lists by the kind's name (JSON, a seed)."""
    return {str(k): [a.tolist(), t.tolist()] for k, (a, t) in table.items()}


def tokens_per_step(rates: list[float]) -> list[float]:
    """E(j) = 1 + sum over i <= j of the chance that the first i are all accepted, for j = 0..len(rates),
    where rates[i - 1] is draft token i's chance given the ones before it.
    A loop, not numpy's cumprod and cumsum: on 16 rates the calls cost more than the sums."""
    out, reach, total = [1.0], 1.0, 0.0
    for r in rates:
        reach *= r
        total += reach
        out.append(1.0 + total)
    return out
