"""The drafters by name, and a drafter name parsed once (`DrafterSpec`).

A name is `none` (plain decoding), a model-free drafter of `REGISTRY`, `auto` (all of
`AUTO_MEMBERS`, chosen among step by step), `auto+MODEL` (those and a model drafter), or a
model drafter alone: a model-store name, .gguf file or export folder. The planner may
append `@trimK` to a model it would cut to its K most used tokens (VocabTrim). Everything
that asks what a name runs (the planner, the memory model, the bench, the CLI) asks a spec.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from edgespec.drafters.lookup import PromptLookupDrafter
from edgespec.drafters.ngram import BYTES_PER_TOKEN as NGRAM_BYTES_PER_TOKEN, NGramCacheDrafter
from edgespec.drafters.recycle import BYTES_PER_ENTRY as RECYCLE_BYTES_PER_ENTRY, TokenRecyclingDrafter
from edgespec.errors import DrafterError
from edgespec.speculative.drafter import Drafter

PLAIN, AUTO, HYBRID, TRIM_MARK = "none", "auto", "auto+", "@trim"


def no_tables(n_vocab: int, n_ctx: int) -> int:
    return 0


@dataclass(frozen=True)
class Registered:
    """A model-free drafter: how it is made from the target's vocabulary size and context,
    the most its tables hold at those (what the memory planner charges it), and whether it
    reads only the text (not the target's logits: the bench can then replay it exactly)."""

    make: Callable[[int, int], Drafter]
    table_bytes: Callable[[int, int], int] = no_tables
    text_only: bool = True


# a new drafter is a file of its own and a line here (docs/usage.md, "Writing a drafter")
REGISTRY: dict[str, Registered] = {
    "lookup": Registered(lambda n_vocab, n_ctx: PromptLookupDrafter(),
                         lambda n_vocab, n_ctx: NGRAM_BYTES_PER_TOKEN * n_ctx),
    "ngram": Registered(lambda n_vocab, n_ctx: NGramCacheDrafter(max_bytes=NGRAM_BYTES_PER_TOKEN * n_ctx),
                        lambda n_vocab, n_ctx: NGRAM_BYTES_PER_TOKEN * n_ctx),
    "recycle": Registered(lambda n_vocab, n_ctx: TokenRecyclingDrafter(n_vocab),
                          lambda n_vocab, n_ctx: RECYCLE_BYTES_PER_ENTRY * n_vocab, text_only=False),
}
AUTO_MEMBERS = ("lookup", "ngram", "recycle")  # what auto mixes


def model_free() -> tuple[str, ...]:
    """Every name that runs no model, for messages (the registry as it is now)."""
    return (PLAIN, *REGISTRY, AUTO)


@dataclass(frozen=True)
class DrafterSpec:
    """What a drafter name runs: its model-free members, its model drafter if any (as named,
    without a trim), and the VocabTrim size a plan gave that model."""

    name: str
    free: tuple[str, ...] = ()
    model: str | None = None
    trim: int | None = None
    mixed: bool = False  # auto or auto+MODEL: the controller picks among the members each step

    @classmethod
    def parse(cls, name: str) -> DrafterSpec:
        if not name:
            raise DrafterError(f"no drafter named; choose one of: {', '.join(model_free())}")
        if name == PLAIN:
            return cls(name)
        if name in REGISTRY:
            return cls(name, free=(name,))
        if name == AUTO:
            return cls(name, free=AUTO_MEMBERS, mixed=True)
        hybrid = name.startswith(HYBRID)
        model, trim = _trim_of(name.removeprefix(HYBRID))
        return cls(name, free=AUTO_MEMBERS if hybrid else (), model=model, trim=trim, mixed=hybrid)

    @property
    def plain(self) -> bool:
        return self.name == PLAIN

    @property
    def uses_model(self) -> bool:
        return self.model is not None

    @property
    def members(self) -> list[str]:
        """What a mixed drafter chooses among, each a drafter of its own ([] for a single one)."""
        alone = self.with_model(self.model, self.trim).name.removeprefix(HYBRID) if self.model else None
        return [*self.free, *([alone] if alone else [])] if self.mixed else []

    @property
    def text_only(self) -> bool:
        """It drafts from the text alone: no model, no member that reads the target's logits."""
        return bool(self.free) and not self.uses_model and all(REGISTRY[m].text_only for m in self.free)

    def table_bytes(self, n_vocab: int, n_ctx: int) -> int:
        """Its model-free members' tables at their bounds (a full context of history)."""
        return sum(REGISTRY[m].table_bytes(n_vocab, n_ctx) for m in self.free)

    def with_model(self, model: str, trim: int | None = None) -> DrafterSpec:
        """The same drafter on another model (a trimmed file, or the planner's `@trimK`)."""
        assert self.uses_model, self.name
        named = model + (f"{TRIM_MARK}{trim}" if trim else "")
        return replace(self, name=(HYBRID if self.mixed else "") + named, model=model, trim=trim)

    def trimmed(self, k: int) -> DrafterSpec:
        """Its model cut to its k most used tokens, as a plan names it before the file is built."""
        return self.with_model(self.model, k)

    @property
    def untrimmed(self) -> str:
        """The name without the planner's trim."""
        return self.with_model(self.model).name if self.trim else self.name

    @property
    def label(self) -> str:
        """A short name for tables: a model given as a path shows as its file or folder name."""
        if not self.uses_model:
            return self.name
        return self.with_model(Path(self.model).name if "/" in self.model else self.model, self.trim).name


def _trim_of(model: str) -> tuple[str, int | None]:
    base, mark, k = model.rpartition(TRIM_MARK)
    return (base, int(k)) if mark and base and k.isdigit() else (model, None)
