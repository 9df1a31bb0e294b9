"""Drafters: proposals of the target's next tokens. One file per kind."""

from __future__ import annotations

from ..controller import DraftController
from ..errors import DrafterError
from .auto import AutoDrafter
from .base import Draft, Drafter
from .lookup import PromptLookupDrafter
from .ngram import NGramCacheDrafter
from .recycle import TokenRecyclingDrafter

MODEL_FREE = ("none", "lookup", "ngram", "recycle", "auto")

__all__ = ["Draft", "Drafter", "PromptLookupDrafter", "NGramCacheDrafter", "TokenRecyclingDrafter",
           "AutoDrafter", "MODEL_FREE", "make_drafter"]


def make_drafter(name: str, n_vocab: int, controller: DraftController) -> Drafter | None:
    """A model-free drafter by name; None for plain decoding."""
    if name == "none":
        return None
    if name == "lookup":
        return PromptLookupDrafter()
    if name == "ngram":
        return NGramCacheDrafter()
    if name == "recycle":
        return TokenRecyclingDrafter(n_vocab)
    if name == "auto":
        return AutoDrafter(
            [PromptLookupDrafter(), NGramCacheDrafter(), TokenRecyclingDrafter(n_vocab)],
            score=controller.expected_gain,
        )
    raise DrafterError(f"unknown drafter {name!r}; choose one of: {', '.join(MODEL_FREE)}")
