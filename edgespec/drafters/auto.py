"""`auto`: ask every model-free drafter, keep the proposal worth the most; with a
model drafter too (`auto+MODEL`, the hybrid), let the model draft only when its
expected gain, net of its own cost, beats the free proposals.

Every proposal is scored by the controller's learned acceptance for its kind
(`Draft.key`) and the measured cost of verifying it, so the choice follows what
actually verifies on this text and this machine. Model-free proposals cost
nothing to make, so they are all asked; a model drafter pays per drafted token,
so it is asked only when it is predicted to pay, at the length the controller
plans for it (with a rare probe, so a drafter that starts paying is noticed).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgespec.spec.controller import DraftController
from edgespec.spec.drafter import EMPTY, Draft, Drafter
from edgespec.spec.verifier import SamplingParams


class AutoDrafter(Drafter):
    name = "auto"

    def __init__(self, drafters: Sequence[Drafter], controller: DraftController) -> None:
        self.drafters = list(drafters)
        self.free = [d for d in self.drafters if d.model_key is None]
        self.models = [d for d in self.drafters if d.model_key is not None]
        self.controller = controller

    def begin(self, history: Sequence[int]) -> None:
        # a model member reads the prompt now, as part of prompt processing: caught
        # up later, in the middle of decoding, the whole prompt would stall one step
        for d in self.drafters:
            d.begin(history)

    def sample_with(self, params: SamplingParams | None, rng: np.random.Generator | None) -> None:
        for d in self.drafters:
            d.sample_with(params, rng)

    @property
    def model_seconds(self) -> float:
        return sum(m.model_seconds for m in self.models)

    def propose(self, history: Sequence[int], k: int) -> Draft:
        ctl = self.controller
        drafts = [draft for d in self.free if len(draft := d.propose(history, k))]
        if len(drafts) == 1 and not self.models:
            return drafts[0]  # nothing to weigh it against: the engine still decides its length
        best, best_score = EMPTY, 1.0
        for draft in drafts:
            s = ctl.expected_gain(draft.key, len(draft))
            if s > best_score or best is EMPTY:
                best, best_score = draft, s
        for m in self.models:
            k_m = m.planned_length(ctl, k)
            if k_m == 0:
                continue
            gain = ctl.expected_gain(m.model_key, k_m, m.cost_per_token)
            if best is EMPTY or gain > best_score:
                draft = m.propose_planned(ctl, history, k_m)
                if len(draft):
                    best, best_score = draft, gain
        return best

    def observe(self, history: Sequence[int], inputs: Sequence[int], logits: np.ndarray,
                next_token: int | None = None) -> None:
        for d in self.drafters:
            d.observe(history, inputs, logits, next_token)

    def reset(self) -> None:
        for d in self.drafters:
            d.reset()

    def memory(self) -> int:
        return sum(d.memory() for d in self.drafters)

    def model_drafters(self) -> list[Drafter]:
        return [m for d in self.drafters for m in d.model_drafters()]

    # a model member's latency, for the bench
    @property
    def steps(self) -> int:
        return sum(m.steps for m in self.models)

    @property
    def step_s(self) -> float:
        return sum(m.step_s for m in self.models)
