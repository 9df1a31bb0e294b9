"""edgespec: lossless speculative decoding for on-device LLMs, inside a memory budget."""

from importlib.metadata import PackageNotFoundError, version

from edgespec.api import Completion, EdgeSpec, Stream
from edgespec.drafters import Draft, Drafter, make_drafter
from edgespec.errors import ContextOverflowError, DrafterError, EdgespecError, ModelError
from edgespec.speculative.backend import Backend, Tokenizer
from edgespec.speculative.engine import Engine
from edgespec.speculative.stats import GenerationStats
from edgespec.speculative.verifier import SamplingParams

try:
    __version__ = version("edgespec")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "EdgeSpec", "Completion", "Stream", "Backend", "Tokenizer", "Draft", "Drafter", "make_drafter",
    "Engine", "SamplingParams", "GenerationStats", "EdgespecError", "ModelError", "ContextOverflowError",
    "DrafterError", "__version__",
]
