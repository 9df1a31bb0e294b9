"""Declined drafts, scored on the text that followed them.

The controller learns a kind's acceptance from the drafts it verifies. A kind whose
estimate fell below what verifying costs is declined, and learned again only from
a probe: one token, after a wait that doubles with every failed probe. On text
that starts to repeat (a rewrite reaching the part it copies) the declined kind
stays silent for long stretches where it would verify several tokens a step. In
greedy decoding a draft's fate needs no verification: a token is accepted exactly
when it is the one the target goes on to write. So a declined draft is kept until
the text shows where it stops matching, and is then learned as if verified whole,
for free; a declined kind then needs no probes. The same holds for the part of a
proposal the controller cut off: once its verified tokens are accepted, the text
decides the rest, so the positions beyond the lengths a kind is verified at are
learned too (without them a long draft, where a copy pays most, is priced by the
short drafts' rates and never tried).

Only the declined draft itself is scored, not the proposals `auto` set aside for a
better one: those come from the steps where another kind looked better, and scoring
them would teach `auto` to prefer kinds that do worse where it chooses them.

What it gains, replayed, is in docs/design.md.
"""

from __future__ import annotations

from typing import Sequence

from edgespec.speculative.acceptance import AcceptanceModel
from edgespec.speculative.drafter import Draft
from edgespec.speculative.sequence import matched_so_far


class Hindsight:
    """Declined drafts waiting for the text to decide them, each compared only with
    the text that arrived since the last call (linear in what is written, however
    long the run)."""

    def __init__(self, acceptance: AcceptanceModel) -> None:
        self.acceptance = acceptance
        self._pending: list[tuple[Draft, int, int, int]] = []  # (draft, where it starts, tokens matched, verified)

    def add(self, draft: Draft, start: int, verified: int = 0) -> None:
        """`draft` proposed the tokens from history position `start` on, and its first
        `verified` are being verified (their verdict is recorded by the controller)."""
        if len(draft) > verified:
            self._pending.append((draft, start, 0, verified))

    def advance(self, history: Sequence[int]) -> None:
        """Learn every pending draft the text now decides."""
        waiting = []
        for draft, start, matched, verified in self._pending:
            matched, decided = matched_so_far(draft.tokens, start, matched, history)
            if decided:
                self.acceptance.record(draft.kind, len(draft), matched, start=verified)
            else:
                waiting.append((draft, start, matched, verified))
        self._pending = waiting
