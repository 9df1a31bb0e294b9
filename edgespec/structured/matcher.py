"""A generation under a grammar (llguidance): the mask applies wherever the target chooses,
greedy taking the argmax of the masked logits and sampling drawing from the masked,
renormalized distribution (the mask comes before temperature, top-k and top-p, as in vLLM and
llama.cpp). A draft is cut at its first token the grammar refuses, so nothing illegal is
verified or emitted. Where the grammar allows one continuation only, its tokens (llguidance's
fast-forward tokens) lead the draft at no drafting cost. The answer ends valid within its
max_tokens (closing.py).
"""

from __future__ import annotations

import functools
import time
from typing import Callable, Sequence

import numpy as np

from edgespec.speculative.backend import Tokenizer
from edgespec.speculative.constraint import Constraint
from edgespec.structured.closing import Closing
from edgespec.structured.grammar import Grammar, GrammarError
from edgespec.structured.vocabulary import view


def _timed(method: Callable) -> Callable:
    """The method's time added to the constraint's `seconds`: what the grammar costs the answer."""

    @functools.wraps(method)
    def timed(self, *args):
        t0 = time.perf_counter()
        try:
            return method(self, *args)
        finally:
            self.seconds += time.perf_counter() - t0

    return timed


class GrammarConstraint(Constraint):
    """One generation under a grammar: llguidance's matcher over the target's vocabulary,
    advanced by the tokens emitted."""

    def __init__(self, grammar: Grammar, tokenizer: Tokenizer) -> None:
        import llguidance

        self.grammar, self.tokenizer = grammar, tokenizer
        self.view = view(tokenizer)
        self.matcher = llguidance.LLMatcher(self.view.lltokenizer, grammar.text, log_level=0)
        self._check()
        self.seconds = 0.0
        self.begin(None)

    @_timed
    def begin(self, max_tokens: int | None) -> None:
        """A generation of at most `max_tokens` (None: no limit) starts here; refused when even the
        shortest answer the grammar allows would not fit."""
        self.closing, self._closed = Closing(self.view, self.matcher, max_tokens), False
        shortest = self.closing.shortest
        if shortest is not None and len(shortest) > max_tokens:
            raise GrammarError(f"max_tokens {max_tokens} is too few for the shortest answer the "
                               f"{self.grammar.description} allows ({len(shortest)} tokens)")

    @_timed
    def forced(self, k: int) -> list[int]:
        """At most k tokens, from here, each the only one the grammar allows where it stands: the
        target's masked choice there is certain, so the text always runs through them (drafters
        may read them as history). llguidance's fast-forward tokens are the candidates."""
        if k <= 0 or self.matcher.is_stopped():
            return []
        forced = []
        for t in self.matcher.compute_ff_tokens()[:k]:
            if not self.view.only(self.view.bits(self.matcher), t) or not self.matcher.consume_token(t):
                break
            forced.append(t)
        if forced:
            self.matcher.rollback(len(forced))
        self._check()
        return forced

    @_timed
    def legal(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from here, the grammar allows in a row."""
        return self.matcher.validate_tokens(list(tokens)) if len(tokens) else 0

    @_timed
    def masked(self, draft: Sequence[int], logits: np.ndarray, argmax_only: bool = False) -> np.ndarray:
        """Rows 0..len(draft) of `logits` (after the last token, then after each draft token, all
        of them legal) with every token the grammar refuses there at -inf. `argmax_only` (greedy):
        a row whose best token is allowed is left as it is, its argmax being the masked one. Rows
        after an end token are left too: the answer ends there, they choose nothing. (One row's
        mask at a time: llguidance.numpy's helper for a draft's rows costs more at the short
        drafts structured answers verify, docs/design.md.)"""
        out = logits[: len(draft) + 1]
        consumed, copied = 0, False
        for i in range(len(out)):
            bits = self.view.bits(self.matcher)
            if not (argmax_only and self.view.allows(bits, int(np.argmax(out[i])))):
                if not copied:
                    out, copied = np.array(out), True
                np.copyto(out[i], -np.inf, where=self.view.refused(bits, out.shape[1]))
            if i == len(draft) or self.tokenizer.is_eog(int(draft[i])):
                break
            if not self.matcher.consume_token(int(draft[i])):
                self._check()
            consumed += 1
        self.matcher.rollback(consumed)
        return out

    @_timed
    def commit(self, tokens: Sequence[int]) -> list[int]:
        """The tokens chosen, through the first end token: the grammar moves past them. Returns
        what to emit: these, or where one would leave the answer no way to close in the tokens
        left, the closing from before it and an end token (closing.py)."""
        out = []
        for t in map(int, tokens):  # one at a time: consume_tokens refuses an end token once the grammar is done
            if not self.closing.fits(self.matcher, t, self.tokenizer.is_eog(t)):
                self._closed = True
                return [*out, *self.closing.here, self.view.end]
            if not self.matcher.consume_token(t):
                self._check()
            out.append(t)
            self.closing.emitted += 1
            if self.tokenizer.is_eog(t):
                break
        return out

    @property
    def closed(self) -> bool:
        """The limit came and the answer is whole: the grammar wrote its closing, or the last
        token the limit allowed closed it."""
        c = self.closing
        return self._closed or c.budget is not None and c.emitted >= c.budget and self.matcher.is_accepting()

    def _check(self) -> None:
        if self.matcher.is_error():
            raise GrammarError(f"the {self.grammar.description} cannot be followed: "
                               f"{self.matcher.get_error().splitlines()[0][:300]}")
