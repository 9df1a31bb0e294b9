"""A VocabTrim'd model as the runtimes read it (`edgespec export --trim-vocab` writes it).

Its logits cover K kept tokens: `vocab_map.json` beside the model says which (row i is
target token ids[i]). A trimmed GGUF also keeps the full input embedding beside it
(`input_embd.gguf`), so a context token outside the kept set reads as in the untrimmed
model; `inputs_trimmed` marks exports that map such a token to a kept one instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import gguf
import numpy as np

VOCAB_MAP = "vocab_map.json"
INPUT_EMBEDDING = "input_embd.gguf"


def read_vocab_map(model_path: Path) -> tuple[np.ndarray | None, bool]:
    """(ids, inputs_trimmed) of a VocabTrim'd model: logits row i is token ids[i];
    (None, False) for a model with its full vocabulary."""
    path = Path(model_path).parent / VOCAB_MAP
    if not path.is_file():
        return None, False
    data = json.loads(path.read_text())
    return np.asarray(data["ids"], dtype=np.int64), bool(data.get("inputs_trimmed"))


class InputEmbedding:
    """The rows of `input_embd.gguf`, read from the mapped file as tokens need them."""

    def __init__(self, path: Path) -> None:
        t = gguf.GGUFReader(str(path)).tensors[0]
        self._data, self._type = t.data, t.tensor_type
        self.n_vocab = len(t.data)
        self.n_embd = int(t.shape[0])  # GGUF lists the row length first

    @classmethod
    def beside(cls, model_path: Path) -> "InputEmbedding | None":
        path = Path(model_path).parent / INPUT_EMBEDDING
        return cls(path) if path.is_file() else None

    def check(self, ids: Sequence[int]) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.n_vocab):
            raise ValueError(f"token id out of range for an embedding of {self.n_vocab} rows")

    def rows(self, ids: Sequence[int]) -> np.ndarray:
        """[len(ids), hidden] float32."""
        self.check(ids)
        return np.ascontiguousarray(gguf.quants.dequantize(self._data[np.asarray(ids)], self._type),
                                    dtype=np.float32)


def input_table(keep: np.ndarray) -> np.ndarray:
    """Target id -> input id of a GGUF trimmed to `keep`. A token outside the kept set
    becomes the least frequent kept one: the drafter guesses worse after it, the
    target still verifies, so output is unchanged."""
    keep = np.asarray(keep)
    table = np.full(int(keep.max()) + 1, len(keep) - 1, dtype=np.int64)
    table[keep] = np.arange(len(keep))
    return table


def map_inputs(ids: Sequence[int], table: np.ndarray, n_kept: int) -> list[int]:
    """`ids` through `input_table`; ids beyond the table fall back like any dropped token."""
    return [int(table[i]) if i < len(table) else n_kept - 1 for i in ids]
