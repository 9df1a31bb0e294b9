"""The closing policy: an answer under a grammar ends valid within its max_tokens. Near the
limit, a token after which the answer could no longer be closed in the tokens left is replaced
by the shortest closing found from where it stands, then an end token (finish_reason "length":
the limit ended it, not the model). The closing is found by a greedy walk, not a search: it is
short for JSON (what closes comes first), and never longer than the window it is sought in.
"""

from __future__ import annotations

import numpy as np

from edgespec.structured.vocabulary import View

# An answer's last tokens check, each, that the answer can still close: the last 64, or twice
# its shortest closing if more; no closing is searched further than that window.
CLOSING_WINDOW, CLOSING_SEARCH = 64, 1024  # CLOSING_SEARCH: how far the shortest answer is sought


class Closing:
    """One generation's closing, at most `budget` tokens (None: no limit) from the matcher's
    state at the start; `shortest` is then the shortest answer found from there."""

    def __init__(self, view: View, matcher, budget: int | None) -> None:
        self.view, self.budget, self.emitted = view, budget, 0
        self.here: list[int] | None = None  # a closing from before the token being checked
        self.shortest = None if budget is None else self.walk(matcher, CLOSING_SEARCH)
        self.window = CLOSING_WINDOW if self.shortest is None else max(CLOSING_WINDOW, 2 * len(self.shortest))

    def fits(self, matcher, t: int, is_end: bool) -> bool:
        """After t the answer can still close within the budget (checked in its last `window`
        tokens; where no closing is found, the answer goes on as chosen). False: `here` is the
        closing to write instead of t."""
        left = None if self.budget is None else self.budget - self.emitted - 1  # tokens after t
        if left is None or left >= self.window or is_end:
            return True
        if self.here is None:
            self.here = self.walk(matcher, self.window)
        if self.here is None or len(self.here) > left + 1:
            self.here = None  # no closing found, or none fits any more: t goes on
            return True
        after = matcher.deep_copy()
        closing = self.walk(after, self.window) if after.consume_token(t) else None
        if closing is None or len(closing) > left:
            return False
        self.here = closing
        return True

    def walk(self, matcher, limit: int) -> list[int] | None:
        """Tokens that take `matcher`'s state to where the answer may end, short by a greedy walk:
        forced tokens as they come, else the first allowed of CLOSING_ORDER's characters but the
        one just chosen (a pattern's loop moves on), else the first token allowed. None if none
        is found within `limit` tokens."""
        v, m, out, last = self.view, matcher.deep_copy(), [], None
        while not m.is_accepting():
            if len(out) >= limit or m.is_error():
                return None
            forced = m.compute_ff_tokens()
            if forced:
                m.consume_tokens(forced)
                out, last = out + forced, None
                continue
            bits = v.bits(m)
            allowed = [t for t in v.alphabet if v.allows(bits, t)]
            t = next((t for t in allowed if t != last or t in v.closers), None)
            if t is None:  # none of those (within a character's bytes, say): the first token allowed
                t = next(iter(np.flatnonzero(~v.refused(bits, v.n_vocab))), None)
            if t is None or not m.consume_token(int(t)):
                return None
            out.append(t)
            last = t
        return out
