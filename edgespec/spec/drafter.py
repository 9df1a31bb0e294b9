"""The Drafter interface: propose target-vocabulary tokens; learn from what was verified."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from edgespec.spec.sequence import common_prefix
from edgespec.spec.verifier import SamplingParams

if TYPE_CHECKING:
    from edgespec.spec.backend import Backend
    from edgespec.spec.controller import DraftController


@dataclass
class Draft:
    """Proposed continuation, in the target's vocabulary.

    `probs` is [len(tokens), n_vocab] when the tokens were sampled from a
    distribution (model drafters in sampling mode); None means deterministic.
    `key` names the kind of proposal (drafter and, e.g., match length) so the
    controller can learn the acceptance of each kind separately.
    """

    tokens: list[int] = field(default_factory=list)
    key: str = ""
    probs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def truncated(self, k: int) -> "Draft":
        if k >= len(self.tokens):
            return self
        return Draft(self.tokens[:k], self.key, None if self.probs is None else self.probs[:k])


EMPTY = Draft()


class Drafter(ABC):
    """Proposes tokens the target is likely to produce next.

    The engine calls `begin` with the prompt of each generation, then per step
    `propose` with the history (prompt + accepted output, the last token
    included) and `observe` after verification. History only grows between
    `begin` calls, so drafters may index it incrementally.
    """

    name: str = "drafter"
    # Model drafters pay for every token they draft, so the engine plans their draft
    # length before asking (learned per `model_key`); model-free drafters propose
    # first and are truncated after, for free.
    model_key: str | None = None
    backend: "Backend | None" = None  # the model a model drafter runs (None: model-free)
    steps: int = 0  # a model drafter's one-token evaluations, and their seconds: its step latency
    step_s: float = 0.0

    @property
    def cost_per_token(self) -> float:
        """Seconds spent per drafted token (measured; 0 for model-free drafters)."""
        return 0.0

    @property
    def sync_seconds(self) -> float:
        """Seconds spent per step catching up with the accepted tokens (measured)."""
        return 0.0

    @property
    def probe_seconds(self) -> float:
        """Seconds a draft costs beyond its tokens after a pause, when the drafter
        must catch up with what was said meanwhile (measured or estimated; 0 for
        model-free drafters): what probing a declined drafter costs."""
        return 0.0

    @property
    def model_seconds(self) -> float:
        """Total seconds a model drafter has spent evaluating its model."""
        return 0.0

    @property
    def token_cost(self) -> tuple[int, float]:
        """A model drafter's (drafted tokens, their seconds) so far: what the planner weighs
        it by. Model-free drafters count nothing."""
        return 0, 0.0

    def planned_length(self, controller: "DraftController", k: int) -> int:
        """How many tokens to ask for, at most k. A model drafter pays for every token it
        drafts, so its length is planned first, from its learned acceptance and measured
        costs (0: none pays); a model-free drafter proposes freely and is cut afterwards."""
        if self.model_key is None:
            return k
        return controller.choose(self.model_key, k, self.sync_seconds, self.cost_per_token, self.probe_seconds)

    def propose_planned(self, controller: "DraftController", history: Sequence[int], k: int) -> Draft:
        """propose(), telling the controller when a model drafter, asked, had nothing to offer."""
        draft = self.propose(history, k)
        if self.model_key is not None and not len(draft):
            controller.record_nothing(self.model_key)
        return draft

    def sample_with(self, params: SamplingParams | None, rng: np.random.Generator | None) -> None:
        """How the coming generation decodes: `params` None is greedy. A model
        drafter then draws its drafts from its own distribution under the same
        params and returns that distribution (Draft.probs), which lets rejection
        sampling accept a draft token with probability min(1, p/q) rather than p;
        model-free drafters propose deterministically either way."""

    def begin(self, history: Sequence[int]) -> None:
        """A generation starts from `history` (for chat: all earlier turns too)."""

    @abstractmethod
    def propose(self, history: Sequence[int], k: int) -> Draft:
        """Up to k tokens to follow `history`."""

    def observe(self, history: Sequence[int], inputs: Sequence[int], logits: np.ndarray,
                next_token: int | None = None) -> None:
        """After a verification step: `inputs` are the step's last token and the
        accepted drafts, `logits[i]` the target's output after `inputs[i]`, and
        `next_token` the token the target chose after the last of them.
        `history` is as of the step's start; the accepted tokens arrive with the
        next `propose`."""

    def reset(self) -> None:
        """Forget everything learned."""

    def memory(self) -> int:
        """Bytes held (approximate for Python containers)."""
        return 0

    def model_drafters(self) -> list["Drafter"]:
        """The drafters in this one that run a model: itself, or a hybrid's members."""
        return [self] if self.backend is not None else []


def model_drafters(drafter: Drafter | None) -> list[Drafter]:
    """The drafters among `drafter` that run a model (none for plain decoding)."""
    return [] if drafter is None else drafter.model_drafters()


def drafter_backends(drafter: Drafter | None) -> list["Backend"]:
    """The backends a drafter runs models on (none for the model-free ones)."""
    return [d.backend for d in model_drafters(drafter)]


class History:
    """Tracks how much of a growing token history a drafter has consumed."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def sync(self, history: Sequence[int], check: bool = False) -> tuple[int, bool]:
        """Returns (start, rewritten): history[start:] is new to the drafter.

        Between `begin` calls history only grows, so the cheap path just appends.
        With `check` (once per generation) a history that diverged from what was
        seen is detected: `start` is then the common prefix and `rewritten` True,
        and position-based indexes must be rebuilt.
        """
        n = len(self.seen)
        if check:
            common = common_prefix(self.seen, history)
            if common < n:
                self.seen = list(history)
                return common, True
        self.seen.extend(history[n:])
        return n, False
