"""Drafters: proposals of the target's next tokens. One file per kind."""

from __future__ import annotations

import numpy as np

from ..backend import Tokenizer
from ..controller import DraftController
from ..errors import DrafterError
from .auto import AutoDrafter
from .base import Draft, Drafter
from .lookup import PromptLookupDrafter
from .model import ModelDrafter
from .ngram import NGramCacheDrafter
from .recycle import TokenRecyclingDrafter

MODEL_FREE = ("none", "lookup", "ngram", "recycle", "auto")

__all__ = ["Draft", "Drafter", "PromptLookupDrafter", "NGramCacheDrafter", "TokenRecyclingDrafter",
           "AutoDrafter", "ModelDrafter", "MODEL_FREE", "make_drafter",
           "check_drafter"]


def make_drafter(name: str, n_vocab: int, controller: DraftController, target_tokenizer: Tokenizer | None = None,
                 n_ctx: int = 4096, threads: int | None = None) -> Drafter | None:
    """A drafter by name, None for plain decoding. Besides the model-free names, a
    model-store name, .gguf file or export folder makes a model drafter, which must
    share the target's vocabulary (VocabTrim'd is fine)."""
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
    if target_tokenizer is None:
        raise DrafterError(f"unknown drafter {name!r}; choose one of: {', '.join(MODEL_FREE)}")
    return _model_drafter(name, target_tokenizer, n_ctx, threads)


def check_drafter(name: str):
    """Refuse an unknown drafter before anything is loaded; returns the model path of a model drafter."""
    if name in MODEL_FREE:
        return None
    from ..errors import ModelError
    from ..store import resolve

    try:
        return resolve(name, quiet=True)
    except ModelError as e:
        raise DrafterError(f"unknown drafter {name!r}: not one of {', '.join(MODEL_FREE)}, and {e}") from None


def _model_drafter(name: str, target: Tokenizer, n_ctx: int, threads: int | None) -> ModelDrafter:
    from ..runtimes import open_backend

    path = check_drafter(name)
    backend = open_backend(path, n_ctx=n_ctx, threads=threads)
    drafter = ModelDrafter(backend)
    # the same vocabulary: each drafter token names the same bytes as the target id it
    # stands for (a GGUF trimmed by VocabTrim numbers its tokens by row of the id map)
    rows = np.arange(backend.tokenizer.n_vocab)
    ids = drafter.vocab_map if getattr(backend, "inputs_trimmed", False) else rows
    sample = np.unique(np.concatenate([rows[:2000], rows[:: max(1, len(rows) // 2000)]]))
    if drafter.target_vocab > target.n_vocab or int(ids.max()) >= target.n_vocab or any(
            backend.tokenizer.token_bytes(int(r)) != target.token_bytes(int(ids[r])) for r in sample
            if not backend.tokenizer.is_special(int(r))):
        backend.close()
        raise DrafterError(f"drafter {name} has another vocabulary than the target: its tokens cannot be mapped "
                           "(cross-vocabulary drafting is not available yet)")
    return drafter
