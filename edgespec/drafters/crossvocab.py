"""A drafter model with another vocabulary than the target's (OmniDraft-style).

The target's history is kept as text re-tokenized in the drafter's vocabulary
(incrementally, see translate.TextView); the drafter drafts greedily on its own
KV cache (a ModelDrafter in its own vocabulary), and its draft comes back as
target tokens through the translation cache or, for runs never seen,
re-tokenization after the history's last target tokens.

Drafts are the drafter's argmax, translated; the verifier treats them as
one-hot proposals, which keeps rejection sampling exact too. With
`sample_drafts`, in sampling mode the drafter draws its tokens instead, and a
drawn token proposes the target token that
spells the same bytes on its own (`single_token_map`); a token with no such
twin ends the draft. The proposal distribution over target ids is then known
exactly (the drafter's, pushed through that map), which rejection sampling
needs for every target id, not only the drafted one. A target token spelled by
several drafter tokens would need the drafter's probability of every spelling
of every candidate, so the product of one spelling's sub-token probabilities
would not keep sampling exact: such tokens are left to the target.
Off by default: the small drafter's distribution is flatter than the target's, so
min(1, p/q) over its draws falls below p at its argmax, and drafts end at every
token without a one-token twin instead of being translated (docs/design.md).
"""

from __future__ import annotations

from typing import Sequence

from edgespec.drafters.model import ModelDrafter
from edgespec.drafters.translate import (TextView, TranslationCache, check_mappable, retokenize_after, single_token_map,
                                         surface)
from edgespec.speculative.backend import Backend, Tokenizer
from edgespec.speculative.drafter import EMPTY, Draft, Drafter, Kind, Sampling
from edgespec.speculative.sequence import common_prefix


XVOCAB = Kind("xvocab")


class CrossVocabDrafter(Drafter):
    name = "xvocab"

    def __init__(self, backend: Backend, target: Tokenizer, max_draft: int = 8, p_min: float = 0.5,
                 lookbehind: int = 4, sample_drafts: bool = False) -> None:
        check_mappable(backend.tokenizer, target)
        self.backend = backend
        self.target = target
        self.lookbehind = lookbehind
        self.model = ModelDrafter(backend, max_draft=max_draft, p_min=p_min, kind=XVOCAB)
        self.cost = self.model.cost
        self.view = TextView(backend.tokenizer, lookbehind)
        self.cache = TranslationCache()
        dt = backend.tokenizer
        self._prefix = [dt.bos_id] if dt.add_bos and dt.bos_id is not None else []
        self._fed: list[int] = []  # target tokens whose text the view holds
        self._t_ends: list[int] = []  # byte offset where each of them ends
        self.sample_drafts = sample_drafts
        self._sampling = False

    def _sync(self, history: Sequence[int]) -> None:
        n = len(self._fed)
        if common_prefix(self._fed, history) < n:  # a new conversation: start over
            self.view.reset()
            self._fed, self._t_ends, n = [], [], 0
        new = list(history[n:])
        if not new:
            return
        start = self.view.done
        pieces = [surface(self.target, t) for t in new]
        pos = len(self.view.data)
        for p in pieces:
            pos += len(p)
            self._t_ends.append(pos)
        self._fed.extend(new)
        self.view.append(b"".join(pieces))
        # learn which target tokens the drafter's runs became, on the text just added
        v = self.view
        lo = len(v.ends)
        while lo > 0 and v.ends[lo - 1] > start:
            lo -= 1
        tlo = len(self._t_ends) - len(new)
        d0 = v.ends[lo - 1] if lo else 0
        t0 = self._t_ends[tlo - 1] if tlo else 0
        self.cache.learn(v.ids[lo:], v.ends[lo:], self._fed[tlo:], self._t_ends[tlo:], d0 == t0, start)

    def begin(self, history: Sequence[int], sampling: Sampling = None) -> None:
        self._sampling = self.sample_drafts and sampling is not None
        if self._sampling and self.model.sampled_map is None:  # built once, when first needed
            self.model.sampled_map = single_token_map(self.backend.tokenizer, self.target, self.backend.n_vocab)
        self.model.sampling = sampling if self._sampling else None  # else argmax drafts, one-hot proposals
        self._sync(history)
        if self.view.ids:
            self.model.begin(self._prefix + self.view.ids, self.model.sampling)

    def propose(self, history: Sequence[int], k: int) -> Draft:
        self._sync(history)
        if k <= 0 or self.view.pending or not self.view.ids:
            return EMPTY  # the history ends inside a character: the drafter cannot see it yet
        d = self.model.propose(self._prefix + self.view.ids, min(k, self.model.max_draft))
        if not len(d):
            return EMPTY
        if self._sampling:  # already target ids, with their distribution
            return Draft(d.tokens, XVOCAB, probs=d.probs)
        out, used = self.cache.translate(d.tokens)
        if used < len(d.tokens):
            rest = b"".join(surface(self.backend.tokenizer, t) for t in d.tokens[used:])
            out += retokenize_after(self.target, [*history[-self.lookbehind:], *out][-self.lookbehind:], rest)
        for i, t in enumerate(out):  # nothing follows an end of generation
            if self.target.is_special(t):
                out = out[: i + 1]
                break
        return Draft(out[:k], XVOCAB) if out else EMPTY

    def reset(self) -> None:
        self.model.reset()
        self.view.reset()
        self._fed, self._t_ends = [], []

    def memory(self) -> int:
        return self.model.memory() + self.cache.memory() + 16 * len(self.view.ids)
