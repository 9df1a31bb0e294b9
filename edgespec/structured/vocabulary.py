"""What llguidance reads of a target's vocabulary, and a grammar's mask over it: a bit per token,
1 where the grammar allows it there."""

from __future__ import annotations

import string
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgespec.speculative.backend import Tokenizer

# The closing walk's choices (closing.py), first allowed first: what closes (strings, arrays,
# objects, a number), then the shortest values, then any character.
CLOSERS = '"]},'
CLOSING_ORDER = CLOSERS + "0123456789[{ -.:@/_" + string.ascii_letters
CLOSING_ORDER += "".join(c for c in string.printable if c not in CLOSING_ORDER)


@dataclass
class View:
    """What a constraint reads of a vocabulary: llguidance's tokenizer, the single-character
    tokens of CLOSING_ORDER in its order (the closing walk's choices), the end token, and the
    vocabulary's size."""

    lltokenizer: Any
    alphabet: list[int]
    closers: frozenset[int]
    end: int
    n_vocab: int

    def bits(self, matcher) -> np.ndarray:
        """The grammar's mask at `matcher`'s state."""
        return np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)

    def allows(self, bits: np.ndarray, t: int) -> bool:
        return t < self.n_vocab and bool(bits[t >> 3] >> (t & 7) & 1)

    def only(self, bits: np.ndarray, t: int) -> bool:
        """t is the one token allowed."""
        return self.allows(bits, t) and bits[t >> 3] == 1 << (t & 7) and np.count_nonzero(bits) == 1

    def refused(self, bits: np.ndarray, width: int) -> np.ndarray:
        """Per token of a logits row `width` wide: True where the mask `bits` refuses it (ids
        past the vocabulary, padding in some models' outputs, are refused)."""
        refused = np.unpackbits(~bits, count=min(width, 8 * len(bits)), bitorder="little").view(bool)
        if len(refused) < width:
            refused = np.concatenate([refused, np.ones(width - len(refused), dtype=bool)])
        refused[self.n_vocab:] = True
        return refused


_VIEWS: "weakref.WeakKeyDictionary[Tokenizer, View]" = weakref.WeakKeyDictionary()


def view(tokenizer: Tokenizer) -> View:
    """A vocabulary's view (built once per tokenizer: a pass over every token)."""
    import llguidance

    if tokenizer not in _VIEWS:
        vocabulary = _Vocabulary(tokenizer)
        single = {}
        for c in CLOSING_ORDER:
            ids = tokenizer.encode(c, add_bos=False, special=False)
            if len(ids) == 1 and tokenizer.token_bytes(ids[0]) == c.encode():
                single[c] = ids[0]
        _VIEWS[tokenizer] = View(
            llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocabulary), eos_token=vocabulary.ends or None),
            list(single.values()), frozenset(single[c] for c in CLOSERS if c in single), vocabulary.eos_token_id,
            tokenizer.n_vocab)
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
