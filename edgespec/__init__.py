"""edgespec: lossless speculative decoding for on-device LLMs, inside a memory budget."""

from importlib.metadata import PackageNotFoundError, version

from .api import Completion, EdgeSpec, Stream
from .backend import Backend, Tokenizer
from .drafters import Draft, Drafter, make_drafter
from .engine import Engine
from .errors import ContextOverflowError, DrafterError, EdgespecError, ModelError
from .stats import GenerationStats
from .verifier import SamplingParams

try:
    __version__ = version("edgespec")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "EdgeSpec", "Completion", "Stream", "Backend", "Tokenizer", "Draft", "Drafter", "make_drafter",
    "Engine", "SamplingParams", "GenerationStats", "EdgespecError", "ModelError", "ContextOverflowError",
    "DrafterError", "__version__",
]
