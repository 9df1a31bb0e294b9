"""The Backend interface: evaluate tokens against a KV cache, and roll it back.

Every runtime (llama.cpp, ONNX Runtime, the FPGA simulation, the reference
numpy model) implements this; the engine and the drafters see nothing else.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Sequence

import numpy as np


class Tokenizer(ABC):
    """A model's vocabulary: text <-> token ids, plus its special tokens."""

    n_vocab: int
    bos_id: int | None
    eos_id: int | None
    add_bos: bool = False  # the model reads its text after a BOS: encode(add_bos=True) puts bos_id first

    @abstractmethod
    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        """Text -> ids. `special` parses special-token text such as <|im_start|>."""

    @abstractmethod
    def token_bytes(self, token: int) -> bytes:
        """The raw bytes a token stands for (partial UTF-8 allowed)."""

    @abstractmethod
    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, <|im_end|>, ...)."""

    def is_special(self, token: int) -> bool:
        """True for control tokens, which are never drafted from text."""
        return False

    @property
    def chat_template(self) -> str | None:
        """The model's own Jinja chat template, if it ships one."""
        return None

    def decode(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def token_text(self, token: int) -> str:
        """The token's text as used in chat templates (e.g. '<|im_end|>')."""
        return self.token_bytes(token).decode("utf-8", errors="replace")


class Backend(ABC):
    """A target model with a single-sequence KV cache.

    Positions 0..n_past-1 are in the cache. `eval` appends tokens and returns the
    logits after each of them; `rollback` forgets everything from a position on.
    """

    name: str = "backend"
    tokenizer: Tokenizer
    n_ctx: int
    device: str = "CPU"  # what it runs on, for people: "CPU", or the GPU's name
    n_threads: int | None = None  # CPU threads it computes on (None: not a CPU thread pool)
    path: Path | None = None  # the model file: what learned acceptance is kept under (None: in memory)
    # a VocabTrim'd drafter: row i of its logits is token vocab_map[i] of the full vocabulary;
    # inputs_trimmed: its input embedding was cut too, so it reads only kept ids
    vocab_map: np.ndarray | None = None
    inputs_trimmed: bool = False
    notice: str | None = None  # one line when the device asked for was not available

    @property
    @abstractmethod
    def n_past(self) -> int:
        """How many tokens the KV cache holds."""

    @property
    def n_vocab(self) -> int:
        return self.tokenizer.n_vocab

    @abstractmethod
    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        """Append `ids` to the cache in one batch.

        Returns float32 logits of shape [n_logits, n_vocab] for the last `n_logits`
        positions (all of them by default). The array may be a view into the
        backend's own buffer, valid until the next call.
        """

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        """Evaluate a prompt; return the logits after its last token, shape [n_vocab]."""
        return self.eval(ids, n_logits=1)[0]

    @abstractmethod
    def rollback(self, n_past: int) -> None:
        """Drop cached positions >= n_past."""

    def _check_rollback(self, n_past: int) -> None:
        """A rollback can only forget: n_past must lie within what the cache holds."""
        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"cannot roll back to {n_past}: the cache holds {self.n_past} tokens")

    @abstractmethod
    def memory(self) -> dict[str, int]:
        """Bytes held, by component (weights, kv_cache, logits, compute, ...)."""

    def set_threads(self, n: int) -> bool:
        """Compute on n CPU threads from now on. False where the count is fixed (a GPU,
        a runtime that sets its thread pool once)."""
        return False

    def cost_key(self) -> str | None:
        """Identifies what batch costs depend on (model, build, threads, machine),
        so measured costs can be reused; None if they should not be cached."""
        return None

    def close(self) -> None:
        """Release native resources. Idempotent."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
