"""The Drafter interface: propose target-vocabulary tokens; learn from what was verified.

As llama.cpp's common/speculative.h: `begin` a generation, `propose` a draft, `observe` what
was verified, `reset`, `memory`. The engine asks the controller how long a draft may be: a
model drafter pays for every token it drafts, so its length is planned from its `cost`
before it is asked; a model-free drafter proposes freely and is cut afterwards, for free.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from edgespec.speculative.sequence import common_prefix
from edgespec.speculative.verifier import SamplingParams

if TYPE_CHECKING:
    from edgespec.speculative.backend import Backend

Sampling = tuple[SamplingParams, np.random.Generator] | None  # a generation's draws; None: greedy


@dataclass(frozen=True)
class Kind:
    """What kind of proposal a draft is: acceptance is learned per kind. `family` is the
    drafter that made it (its batches' cost is judged per family); `tags` split a family
    where acceptance differs (lookup: match length, ambiguous, continued, from the prompt).
    Stored by name, `family/tag/tag`."""

    family: str
    tags: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "/".join((self.family, *self.tags))

    @classmethod
    def parse(cls, name: str) -> "Kind":
        """The kind a stored name stands for."""
        family, *tags = name.split("/")
        return cls(family, tuple(tags))

    def without(self, *tags: str) -> "Kind":
        return Kind(self.family, tuple(t for t in self.tags if t not in tags))


@dataclass
class Draft:
    """Proposed continuation, in the target's vocabulary.

    `probs` is [len(tokens), n_vocab] when the tokens were sampled from a
    distribution (model drafters in sampling mode); None means deterministic.
    """

    tokens: list[int] = field(default_factory=list)
    kind: Kind = Kind("")
    probs: np.ndarray | None = None
    forced: int = 0  # its first tokens are the only ones a grammar allows (structured/matcher.py): no drafter's

    def __len__(self) -> int:
        return len(self.tokens)

    def truncated(self, k: int) -> "Draft":
        if k >= len(self.tokens):
            return self
        return Draft(self.tokens[:k], self.kind, None if self.probs is None else self.probs[:k], min(self.forced, k))

    def after(self, forced: list[int]) -> "Draft":
        """The grammar's forced tokens, then this draft: drawn from nowhere, their rows are one-hot."""
        if not forced:
            return self
        probs = self.probs
        if probs is not None:
            rows = np.zeros((len(forced), max(probs.shape[1], max(forced) + 1)), dtype=probs.dtype)
            rows[np.arange(len(forced)), forced] = 1.0
            probs = np.concatenate([rows, np.pad(probs, ((0, 0), (0, rows.shape[1] - probs.shape[1])))])
        return Draft([*forced, *self.tokens], self.kind if self.tokens else Kind("forced"), probs,
                     self.forced + len(forced))

    def legal(self, n: int) -> "Draft":
        """The first n tokens, the rest refused by a grammar. A sampled draft keeps the row the
        refused token was drawn from: verification treats that draw as rejected (verifier.py)."""
        if n >= len(self.tokens):
            return self
        cut = self.truncated(n)
        return cut if self.probs is None else Draft(cut.tokens, cut.kind, self.probs[: n + 1], cut.forced)

    def through_end(self, is_eog: Callable[[int], bool]) -> "Draft":
        """The draft up to its first end-of-generation token, included. The answer ends there
        if that token is accepted, and the text parts from the draft there if not, so rows
        after it are verified for nothing (a copy of a chat question runs into its
        end-of-turn token within a few tokens)."""
        return self.truncated(next((i + 1 for i, t in enumerate(self.tokens) if is_eog(t)), len(self.tokens)))


EMPTY = Draft()


class ModelCost:
    """What a model drafter's drafting costs, as measured: the controller plans its draft
    length by it, the memory planner weighs drafters by it (calibration keeps it per
    drafter backend). One per drafter model; the drafter adds each evaluation."""

    def __init__(self, kind: Kind, backend: "Backend", window: int | None = None) -> None:
        self.kind, self.backend = kind, backend
        self.window = window  # a catch-up after a pause reads at most this many tokens (None: all)
        self.steps, self.step_s = 0, 0.0  # one-token evaluations that drafted a further token
        self.syncs, self.sync_s = 0, 0.0  # catch-ups with the accepted history that drafted the first
        self.eval_s = 0.0  # every evaluation, prompt included
        self.read = (0, 0.0)  # tokens read in batches longer than a step (prompts, catch-ups), and seconds
        self.probe_s: float | None = None  # the last catch-up after a pause, measured

    @property
    def per_token(self) -> float:
        """Seconds per further drafted token."""
        return self.step_s / self.steps if self.steps else 0.0

    @property
    def sync_seconds(self) -> float:
        """Seconds per step catching up with the accepted tokens."""
        return self.sync_s / self.syncs if self.syncs else 0.0

    @property
    def probe_seconds(self) -> float:
        """What a draft costs beyond its tokens after a pause: at most `window` tokens read, as
        last measured, or until then estimated from how fast the prompt was read."""
        if self.window is None:
            return 0.0  # it grows with the pause; the controller's doubling interval bounds it
        if self.probe_s is not None:
            return self.probe_s
        n, seconds = self.read
        return self.window * seconds / n if n else 0.0

    @property
    def token_cost(self) -> tuple[int, float]:
        """(evaluations that each yielded a draft token, their seconds): what the planner
        prices drafting by."""
        return self.syncs + self.steps, self.sync_s + self.step_s


class Drafter(ABC):
    """Proposes tokens the target is likely to produce next.

    History (prompt + accepted output, the last token included) only grows between
    `begin` calls, so drafters may index it incrementally.
    """

    name: str = "drafter"
    cost: ModelCost | None = None  # a model drafter's measured costs; None: model-free, free to ask

    def begin(self, history: Sequence[int], sampling: Sampling = None) -> None:
        """A generation starts from `history` (for chat: all earlier turns too), greedy or
        drawing with `sampling` (params, rng): a model drafter then draws its drafts from its
        own distribution and returns it (Draft.probs), so rejection sampling accepts with
        min(1, p/q) rather than p; model-free drafters propose deterministically either way."""

    @abstractmethod
    def propose(self, history: Sequence[int], k: int) -> Draft:
        """Up to k tokens to follow `history`."""

    def observe(self, history: Sequence[int], inputs: Sequence[int], logits: np.ndarray,
                next_token: int | None = None) -> None:
        """After a verification step: `inputs` are the step's last token and the accepted
        drafts, `logits[i]` the target's output after `inputs[i]`, `next_token` the target's
        choice after the last of them. `history` is as of the step's start."""

    def reset(self) -> None:
        """Forget everything learned."""

    def memory(self) -> int:
        """Bytes held (approximate for Python containers)."""
        return 0

    def models(self) -> list[ModelCost]:
        """The costs of the models this drafter runs: its own, or a hybrid's members'."""
        return [self.cost] if self.cost is not None else []


def model_costs(drafter: Drafter | None) -> list[ModelCost]:
    """The models among `drafter` (none for plain decoding)."""
    return [] if drafter is None else drafter.models()


def drafter_backends(drafter: Drafter | None) -> list["Backend"]:
    """The backends a drafter runs models on (none for the model-free ones)."""
    return [c.backend for c in model_costs(drafter)]


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
