"""`auto`: ask every model-free drafter, keep the proposal worth the most; with a
model drafter too (`auto+MODEL`, the hybrid), let the model draft only when its
expected gain, net of its own cost, beats the free proposals.

Every proposal is scored by the controller's learned acceptance for its kind
(`Draft.kind`) and the measured cost of verifying it, so the choice follows what
actually verifies on this text and this machine. Model-free proposals cost
nothing to make, so they are all asked; a model drafter pays per drafted token,
so it is asked only when it is predicted to pay, at the length the controller
plans for it (with a rare probe, a burst of drafts verified whatever the free proposals
offer, so a drafter that starts paying is noticed).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgespec.speculative.controller import DraftController
from edgespec.speculative.drafter import EMPTY, Draft, Drafter, ModelCost, Sampling


class AutoDrafter(Drafter):
    name = "auto"

    def __init__(self, drafters: Sequence[Drafter], controller: DraftController) -> None:
        self.drafters = list(drafters)
        self.free = [d for d in self.drafters if d.cost is None]
        self.paying = [d for d in self.drafters if d.cost is not None]
        self.controller = controller

    def begin(self, history: Sequence[int], sampling: Sampling = None) -> None:
        # a model member reads the prompt now, as part of prompt processing: caught
        # up later, in the middle of decoding, the whole prompt would stall one step
        for d in self.drafters:
            d.begin(history, sampling)

    def propose(self, history: Sequence[int], k: int) -> Draft:
        ctl = self.controller
        drafts = [draft for d in self.free if len(draft := d.propose(history, k))]
        if len(drafts) == 1 and not self.paying:
            return drafts[0]  # nothing to weigh it against: the engine still decides its length
        best, best_score = EMPTY, 1.0
        for draft in drafts:
            s = ctl.expected_gain(draft.kind, len(draft))
            if s > best_score or best is EMPTY:
                best, best_score = draft, s
        for m in self.paying:
            k_m = ctl.draft_length(m.cost, k)
            if k_m == 0:
                continue
            gain = ctl.expected_gain(m.cost.kind, k_m, m.cost.per_token)
            if best is EMPTY or gain > best_score or ctl.bursting:  # a probe learns only if verified
                draft = m.propose(history, k_m)
                ctl.asked(m.cost, draft)
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

    def models(self) -> list[ModelCost]:
        return [c for d in self.drafters for c in d.models()]
