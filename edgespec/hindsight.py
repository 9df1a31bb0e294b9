"""Declined drafts, scored on the text that followed them.

The controller learns a kind's acceptance from the drafts it verifies. A kind whose
estimate fell below what verifying costs is declined, and learned again only from
a probe: one token, after a wait that doubles with every failed probe. On text
that starts to repeat (a rewrite reaching the part it copies) the declined kind
stays silent for long stretches where it would verify several tokens a step. In
greedy decoding a draft's fate needs no verification: a token is accepted exactly
when it is the one the target goes on to write. So a declined draft is kept until
the text shows where it stops matching, and is then learned as if verified whole,
for free; a declined kind then needs no probes.

Only the declined draft itself is scored, not the proposals `auto` set aside for a
better one: those come from the steps where another kind looked better, and scoring
them taught `auto` to prefer kinds that then did worse where it chose them.

Measured by replaying Qwen2.5-Coder-1.5B's plain greedy outputs (256 tokens) through
the engine at the Xeon's batch costs (2 tokens 1.47x one, 3: 1.84x, 4: 1.61x, 8:
3.19x, 16: 3.67x; `edgespec.replay`), x plain, code / summarize / chat, one engine
for all prompts in that order, as the bench runs them. The 12 shipped prompts:
`lookup` 1.609 / 1.407 / 1.048 -> 1.736 / 1.456 / 1.031, `auto` 1.516 / 1.328 /
1.041 -> 1.762 / 1.452 / 1.025. The 18 held-out prompts (`data/heldout_prompts.jsonl`):
`lookup` 1.598 / 1.660 / 1.041 -> 1.615 / 1.771 / 1.039, `auto` 1.617 / 1.734 /
1.043 -> 1.616 / 1.771 / 1.038. Chat alone, in a fresh engine, gains (`lookup`
1.015 -> 1.025 and 1.034 -> 1.043, `auto` 1.016 -> 1.023 and 1.015 -> 1.041); after
code and summaries it loses up to 0.02 (what each kind learned on those texts
carries into chat).
"""

from __future__ import annotations

from typing import Sequence

from .controller import AcceptanceModel
from .drafters.base import Draft
from .sequence import common_prefix


class Hindsight:
    """Declined drafts waiting for the text to decide them, each compared only with
    the text that arrived since the last call (linear in what is written, however
    long the run)."""

    def __init__(self, acceptance: AcceptanceModel) -> None:
        self.acceptance = acceptance
        self._pending: list[tuple[Draft, int, int]] = []  # (draft, where it starts, tokens matched)

    def add(self, draft: Draft, start: int) -> None:
        """`draft` proposed the tokens from history position `start` on."""
        if len(draft):
            self._pending.append((draft, start, 0))

    def advance(self, history: Sequence[int]) -> None:
        """Learn every pending draft the text now decides."""
        waiting = []
        for draft, start, matched in self._pending:
            tokens = draft.tokens
            end = min(len(tokens), len(history) - start)
            matched += common_prefix(tokens[matched:end], history[start + matched : start + end])
            if matched == len(tokens) or matched < end:  # all matched, or a mismatch seen
                self.acceptance.record(draft.key, len(tokens), matched)
            else:
                waiting.append((draft, start, matched))
        self._pending = waiting
