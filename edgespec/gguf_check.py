"""Structural validation of a GGUF file before native code sees it.

llama.cpp trusts offsets and sizes in the file; a truncated download would be
read past its end. We parse the file with the `gguf` package and check that
every tensor lies inside the file and a vocabulary is present.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType

from .errors import ModelError

GGUF_MAGIC = b"GGUF"
MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS: more aborts the process (GGML_ASSERT in llama-model.cpp)


class _Reader(GGUFReader):
    """GGUFReader over a plain ndarray view of its memmap.

    Slicing an np.memmap runs Python code per slice; a 150k-token vocabulary makes
    that tens of seconds. A base-class view of the same mapping is 7x faster.
    """

    @property
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._data = value.view(np.ndarray)


def read_gguf(path: str | os.PathLike) -> GGUFReader:
    """A GGUFReader for a file already checked (the fast one above)."""
    return _Reader(path, "r")


@dataclass(frozen=True)
class GGUFSummary:
    path: Path
    architecture: str
    n_tensors: int
    n_vocab: int
    size: int


def check_gguf(path: str | os.PathLike) -> GGUFSummary:
    """Raise ModelError unless `path` is a complete, well-formed GGUF model file."""
    return _checked(path)[1]


def read_checked_gguf(path: str | os.PathLike) -> GGUFReader:
    """check_gguf, then the reader it parsed (one parse, not two)."""
    return _checked(path)[0]


def _checked(path: str | os.PathLike) -> tuple[GGUFReader, GGUFSummary]:
    p = Path(path)
    if not p.is_file():
        raise ModelError(f"model file not found: {p}")
    size = p.stat().st_size
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelError(f"{p} is not a GGUF file (bad magic {magic!r})")
    try:
        reader = _Reader(p, "r")
    except Exception as e:  # the reader raises many kinds of errors on damaged input
        raise ModelError(f"{p} is a corrupt GGUF file: {e}") from None
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise ModelError(
                f"{p} is truncated: tensor {t.name} ends at byte {end:,} but the file has {size:,}"
            )
    fields = reader.fields
    arch_field = fields.get("general.architecture")
    arch = arch_field.contents() if arch_field is not None else "unknown"
    tokens = fields.get("tokenizer.ggml.tokens")
    if tokens is None or len(tokens.data) == 0:
        raise ModelError(f"{p} has no vocabulary (tokenizer.ggml.tokens is missing)")
    if not reader.tensors:
        raise ModelError(f"{p} holds no tensors (a vocabulary-only file cannot generate)")
    _check_vocabulary(p, tokens)
    _check_layers(p, reader, str(arch))
    return reader, GGUFSummary(p, str(arch), len(reader.tensors), len(tokens.data), size)


def _check_vocabulary(p: Path, tokens) -> None:
    # llama.cpp aborts the process (GGML_ASSERT in llama-vocab.cpp) when two tokens
    # share a text; one flipped byte in a downloaded file is enough
    if tokens.types[1:] != [GGUFValueType.STRING]:
        raise ModelError(f"{p} is a corrupt GGUF file: tokenizer.ggml.tokens is not a list of strings")
    seen: dict[bytes, int] = {}
    for i, part in enumerate(tokens.data):
        text = tokens.parts[part].tobytes()
        if text in seen:
            raise ModelError(f"{p} is a corrupt GGUF file: tokens {seen[text]} and {i} are both {text[:40]!r}")
        seen[text] = i


def _check_layers(p: Path, reader: GGUFReader, arch: str) -> None:
    field = reader.fields.get(f"{arch}.block_count")
    if field is None:
        return  # an architecture without layers in its metadata: llama.cpp says what it misses
    try:
        n_layer = int(field.contents())
    except (TypeError, ValueError):
        raise ModelError(f"{p} is a corrupt GGUF file: {arch}.block_count is not a number") from None
    if not 0 < n_layer <= MAX_LAYERS:
        raise ModelError(f"{p} is a corrupt GGUF file: {arch}.block_count is {n_layer} (llama.cpp allows 1 to {MAX_LAYERS})")
    names = {t.name for t in reader.tensors}
    if any(n.startswith("blk.") for n in names) and not any(n.startswith(f"blk.{n_layer - 1}.") for n in names):
        raise ModelError(f"{p} is a corrupt GGUF file: {arch}.block_count is {n_layer} but there are no "
                         f"tensors for layer {n_layer - 1}")
