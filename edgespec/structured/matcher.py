"""A generation under a grammar (llguidance): the mask applies wherever the target chooses,
greedy taking the argmax of the masked logits and sampling drawing from the masked,
renormalized distribution (the mask comes before temperature, top-k and top-p, as in vLLM and
llama.cpp). A draft is cut at its first token the grammar refuses, so nothing illegal is
verified or emitted. Where the grammar allows one continuation only, its tokens (llguidance's
fast-forward tokens) lead the draft at no drafting cost.

An answer ends valid within its max_tokens: near the limit, a token after which the answer could
no longer be closed in the tokens left is replaced by the shortest closing found from where it
stands (finish_reason "length": the limit ended it, not the model).
"""

from __future__ import annotations

import functools
import string
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from edgespec.speculative.backend import Tokenizer
from edgespec.speculative.constraint import Constraint
from edgespec.structured.grammar import Grammar, GrammarError

# The closing walk's choices, first allowed first: what closes (strings, arrays, objects, a
# number), then the shortest values, then any character.
CLOSERS = '"]},'
CLOSING_ORDER = CLOSERS + "0123456789[{ -.:@/_" + string.ascii_letters
CLOSING_ORDER += "".join(c for c in string.printable if c not in CLOSING_ORDER)
# An answer's last tokens check, each, that the answer can still close: the last 64, or twice
# its shortest closing if more; no closing is searched further than that window.
CLOSING_WINDOW, CLOSING_SEARCH = 64, 1024  # CLOSING_SEARCH: how far the shortest answer is sought



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
        self.view = _view(tokenizer)
        self.matcher = llguidance.LLMatcher(self.view.lltokenizer, grammar.text, log_level=0)
        self._check()
        self.n_vocab = tokenizer.n_vocab
        self.seconds = 0.0
        self.begin(None)

    @_timed
    def begin(self, max_tokens: int | None) -> None:
        """A generation of at most `max_tokens` (None: no limit) starts here; refused when even the
        shortest answer the grammar allows would not fit."""
        self.budget, self.emitted, self._closed, self._closing_here = max_tokens, 0, False, None
        shortest = None if max_tokens is None else self._closing(self.matcher, CLOSING_SEARCH)
        self.window = CLOSING_WINDOW if shortest is None else max(CLOSING_WINDOW, 2 * len(shortest))
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
            if not self._only(self._bits(), t) or not self.matcher.consume_token(t):
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
        after an end token are left too: the answer ends there, they choose nothing."""
        out = logits[: len(draft) + 1]
        consumed, copied = 0, False
        for i in range(len(out)):
            bits = self._bits()
            if not (argmax_only and self._allows(bits, int(np.argmax(out[i])))):
                if not copied:
                    out, copied = np.array(out), True
                np.copyto(out[i], -np.inf, where=self._refused(bits, out.shape[1]))
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
        left, the shortest closing from before it and an end token."""
        out = []
        for t in map(int, tokens):  # one at a time: consume_tokens refuses an end token once the grammar is done
            if not self._fits(t):
                self._closed = True
                return [*out, *self._closing_here, self.view.end]
            if not self.matcher.consume_token(t):
                self._check()
            out.append(t)
            self.emitted += 1
            if self.tokenizer.is_eog(t):
                break
        return out

    @property
    def closed(self) -> bool:
        """The limit came and the answer is whole: the grammar wrote its closing, or the last
        token the limit allowed closed it."""
        return self._closed or self.budget is not None and self.emitted >= self.budget and self.matcher.is_accepting()

    def _fits(self, t: int) -> bool:
        """After t the answer can still close within the budget (checked in its last `window`
        tokens; where no closing is found, the answer goes on as chosen)."""
        left = None if self.budget is None else self.budget - self.emitted - 1  # tokens after t
        if left is None or left >= self.window or self.tokenizer.is_eog(t):
            return True
        if self._closing_here is None:
            self._closing_here = self._closing(self.matcher, self.window)
        if self._closing_here is None or len(self._closing_here) > left + 1:
            self._closing_here = None  # no closing found, or none fits any more: t goes on
            return True
        after = self.matcher.deep_copy()
        closing = self._closing(after, self.window) if after.consume_token(t) else None
        if closing is None or len(closing) > left:
            return False
        self._closing_here = closing
        return True

    def _closing(self, matcher, limit: int) -> list[int] | None:
        """Tokens that take `matcher`'s state to where the answer may end, short by a greedy walk:
        forced tokens as they come, else the first allowed of CLOSING_ORDER's characters but the
        one just chosen (a pattern's loop moves on), else the first token allowed. None if none
        is found within `limit` tokens."""
        m, out, last = matcher.deep_copy(), [], None
        while not m.is_accepting():
            if len(out) >= limit or m.is_error():
                return None
            forced = m.compute_ff_tokens()
            if forced:
                m.consume_tokens(forced)
                out, last = out + forced, None
                continue
            bits = self._bits(m)
            allowed = [t for t in self.view.alphabet if self._allows(bits, t)]
            t = next((t for t in allowed if t != last or t in self.view.closers), None)
            if t is None:  # none of those (within a character's bytes, say): the first token allowed
                t = next(iter(np.flatnonzero(~self._refused(bits, self.n_vocab))), None)
            if t is None or not m.consume_token(int(t)):
                return None
            out.append(t)
            last = t
        return out

    def _bits(self, matcher=None) -> np.ndarray:
        """The grammar's mask here (or at `matcher`'s state): a bit per token, 1 where allowed."""
        return np.frombuffer((matcher or self.matcher).compute_bitmask(), dtype=np.uint8)

    def _allows(self, bits: np.ndarray, t: int) -> bool:
        return t < self.n_vocab and bool(bits[t >> 3] >> (t & 7) & 1)

    def _only(self, bits: np.ndarray, t: int) -> bool:
        """t is the one token allowed."""
        return self._allows(bits, t) and bits[t >> 3] == 1 << (t & 7) and np.count_nonzero(bits) == 1

    def _refused(self, bits: np.ndarray, width: int) -> np.ndarray:
        """Per token of a logits row `width` wide: True where the mask `bits` refuses it (ids
        past the vocabulary, padding in some models' outputs, are refused)."""
        refused = np.unpackbits(~bits, count=min(width, 8 * len(bits)), bitorder="little").view(bool)
        if len(refused) < width:
            refused = np.concatenate([refused, np.ones(width - len(refused), dtype=bool)])
        refused[self.n_vocab:] = True
        return refused

    def _check(self) -> None:
        if self.matcher.is_error():
            raise GrammarError(f"the {self.grammar.description} cannot be followed: "
                               f"{self.matcher.get_error().splitlines()[0][:300]}")


@dataclass
class _View:
    """What a Constraint reads of a vocabulary: llguidance's tokenizer, the single-character
    tokens of CLOSING_ORDER in its order (the closing walk's choices), and the end token."""

    lltokenizer: Any
    alphabet: list[int]
    closers: frozenset[int]
    end: int


_VIEWS: "weakref.WeakKeyDictionary[Tokenizer, _View]" = weakref.WeakKeyDictionary()


def _view(tokenizer: Tokenizer) -> _View:
    """A vocabulary's view (built once per tokenizer: a pass over every token)."""
    import llguidance

    if tokenizer not in _VIEWS:
        vocabulary = _Vocabulary(tokenizer)
        single = {}
        for c in CLOSING_ORDER:
            ids = tokenizer.encode(c, add_bos=False, special=False)
            if len(ids) == 1 and tokenizer.token_bytes(ids[0]) == c.encode():
                single[c] = ids[0]
        _VIEWS[tokenizer] = _View(
            llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocabulary), eos_token=vocabulary.ends or None),
            list(single.values()), frozenset(single[c] for c in CLOSERS if c in single), vocabulary.eos_token_id)
    return _VIEWS[tokenizer]


class _Vocabulary:
    """What llguidance's TokenizerWrapper reads: each token's bytes (a special token's text
    after 0xff, llguidance's mark for it), the end tokens, and a way to tokenize text."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        special = [t for t in range(tokenizer.n_vocab) if tokenizer.is_special(t) or tokenizer.is_eog(t)]
        ends = [t for t in special if tokenizer.is_eog(t)]
        self.tokens = [tokenizer.token_bytes(t) for t in range(tokenizer.n_vocab)]
        for t in special:
            self.tokens[t] = b"\xff" + tokenizer.token_text(t).encode("utf-8")
        self.ends = ends
        self.eos_token_id = tokenizer.eos_id if tokenizer.eos_id in ends else (ends or [0])[0]
        self.bos_token_id = tokenizer.bos_id
        self.special_token_ids = special

    def __call__(self, text: str) -> list[int]:
        if isinstance(text, bytes):  # tells TokenizerWrapper to pass text: encode takes str
            raise TypeError("text, not bytes")
        return self._tokenizer.encode(text, add_bos=False, special=False)
