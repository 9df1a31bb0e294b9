"""Drafters: proposals of the target's next tokens. One file per kind."""

from __future__ import annotations

import numpy as np

from edgespec.drafters.auto import AutoDrafter
from edgespec.drafters.crossvocab import CrossVocabDrafter
from edgespec.drafters.lookup import PromptLookupDrafter
from edgespec.drafters.model import ModelDrafter
from edgespec.drafters.ngram import NGramCacheDrafter
from edgespec.drafters.recycle import TokenRecyclingDrafter
from edgespec.drafters.registry import AUTO, AUTO_MEMBERS, HYBRID, PLAIN, REGISTRY, TRIM_MARK, DrafterSpec, Registered, model_free
from edgespec.errors import DrafterError, ModelError
from edgespec.models.store import resolve
from edgespec.runtimes import open_backend
from edgespec.speculative.backend import Tokenizer
from edgespec.speculative.controller import DraftController
from edgespec.speculative.drafter import Draft, Drafter

__all__ = ["Draft", "Drafter", "PromptLookupDrafter", "NGramCacheDrafter", "TokenRecyclingDrafter",
           "AutoDrafter", "ModelDrafter", "CrossVocabDrafter", "REGISTRY", "Registered", "DrafterSpec",
           "AUTO_MEMBERS", "PLAIN", "AUTO", "HYBRID", "model_free", "make_drafter", "check_drafter"]


def make_drafter(name: str, n_vocab: int, controller: DraftController, target_tokenizer: Tokenizer | None = None,
                 n_ctx: int = 4096, threads: int | None = None, backend_options: dict | None = None) -> Drafter | None:
    """A drafter by name, None for plain decoding. Besides the model-free names, a
    model-store name, .gguf file or export folder makes a model drafter: of the
    target's vocabulary (VocabTrim'd is fine) or, through text, of another one.
    `auto+MODEL` is the hybrid: the model-free drafters and that model drafter."""
    spec = DrafterSpec.parse(name)
    if spec.plain:
        return None
    if spec.uses_model and target_tokenizer is None:
        if spec.mixed:
            raise DrafterError("a hybrid drafter needs the target's tokenizer")
        raise DrafterError(f"unknown drafter {name!r}; choose one of: {', '.join(model_free())}")
    members = [REGISTRY[m].make(n_vocab, n_ctx) for m in spec.free]
    if spec.uses_model:
        members.append(_model_drafter(spec.model, target_tokenizer, n_ctx, threads, backend_options))
    return AutoDrafter(members, controller) if spec.mixed else members[0]


def check_drafter(name: str):
    """Refuse an unknown drafter before anything is loaded; returns the model path of a model drafter."""
    spec = DrafterSpec.parse(name)
    if not spec.uses_model:
        return None
    try:
        if spec.trim:  # the planner's mark, not a file: a trimmed model is named by its export
            raise ModelError(f"{TRIM_MARK}K names a trim the memory planner builds; name a trimmed export instead")
        return resolve(spec.model, quiet=True)
    except ModelError as e:
        raise DrafterError(f"unknown drafter {name!r}: not one of {', '.join(model_free())}, and {e}") from None


def _model_drafter(name: str, target: Tokenizer, n_ctx: int, threads: int | None,
                   backend_options: dict | None = None) -> Drafter:
    path = check_drafter(name)
    backend = open_backend(path, n_ctx=n_ctx, threads=threads, **(backend_options or {}))
    drafter = ModelDrafter(backend)
    if same_vocabulary(drafter, target):
        return drafter
    if drafter.vocab_map is not None:
        backend.close()
        raise DrafterError(f"drafter {name} is VocabTrim'd from another vocabulary than the target's: "
                           "trim a drafter of the target's own vocabulary, or use the untrimmed model")
    try:
        return CrossVocabDrafter(backend, target)
    except DrafterError as e:
        backend.close()
        raise DrafterError(f"drafter {name}: {e}") from None


def same_vocabulary(drafter: ModelDrafter, target: Tokenizer) -> bool:
    """True if each drafter token names the same bytes as the target id it stands for
    (a GGUF trimmed by VocabTrim numbers its tokens by row of the id map)."""
    backend = drafter.backend
    rows = np.arange(backend.tokenizer.n_vocab)
    trimmed = drafter.vocab_map is not None and len(drafter.vocab_map) == len(rows)
    ids = drafter.vocab_map if trimmed else rows
    sample = np.unique(np.concatenate([rows[:2000], rows[:: max(1, len(rows) // 2000)]]))
    return not (drafter.target_vocab > target.n_vocab or int(ids.max()) >= target.n_vocab or any(
        backend.tokenizer.token_bytes(int(r)) != target.token_bytes(int(ids[r])) for r in sample
        if not backend.tokenizer.is_special(int(r))))
