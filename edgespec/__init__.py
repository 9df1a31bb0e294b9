"""edgespec: lossless speculative decoding for on-device LLMs, inside a memory budget.

The names below load on first use, so `import edgespec.errors` or the `edgespec` command's
start does not pay for numpy, llama.cpp and the drafters until something needs them.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

try:
    __version__ = version("edgespec")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

_HOME = {
    "EdgeSpec": "edgespec.api", "Completion": "edgespec.completion", "Stream": "edgespec.completion",
    "Draft": "edgespec.drafters", "Drafter": "edgespec.drafters", "make_drafter": "edgespec.drafters",
    "EdgespecError": "edgespec.errors", "ModelError": "edgespec.errors",
    "ContextOverflowError": "edgespec.errors", "DrafterError": "edgespec.errors",
    "Backend": "edgespec.speculative.backend", "Tokenizer": "edgespec.speculative.backend",
    "Engine": "edgespec.speculative.engine", "GenerationStats": "edgespec.speculative.stats",
    "SamplingParams": "edgespec.speculative.verifier",
    "Grammar": "edgespec.structured.grammar", "Tools": "edgespec.structured.tools",
}
__all__ = [*_HOME, "__version__"]


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'edgespec' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from edgespec.api import EdgeSpec
    from edgespec.completion import Completion, Stream
    from edgespec.drafters import Draft, Drafter, make_drafter
    from edgespec.errors import ContextOverflowError, DrafterError, EdgespecError, ModelError
    from edgespec.speculative.backend import Backend, Tokenizer
    from edgespec.speculative.engine import Engine
    from edgespec.speculative.stats import GenerationStats
    from edgespec.structured.grammar import Grammar
    from edgespec.speculative.verifier import SamplingParams
    from edgespec.structured.tools import Tools
