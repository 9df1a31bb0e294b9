"""The reference model seen through another vocabulary: byte pieces merged into
multi-byte tokens, as a second tokenizer for exact cross-vocabulary tests.

`MergedVocabBackend` runs the batch-invariant byte-level reference model
underneath, so its greedy output is exactly reproducible, while its token ids,
boundaries and special tokens differ from the byte tokenizer's.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from edgespec.errors import ContextOverflowError
from edgespec.runtimes.reference import ByteTokenizer, ReferenceBackend, ReferenceModel
from edgespec.speculative.backend import Backend, Tokenizer

MERGES = [b"th", b"he", b"the", b" t", b" the", b"in", b"er", b"an", b"e ", b"s ", b", ", b". ", b"on", b"re",
          b"  ", b"    ", b"\n\n", b"de", b"f ", b"()", b"ing", b"ion", b" a", b"at", b"en", b"es", b"or",
          "é".encode(), "ün".encode(), "日本".encode()]


class MergeTokenizer(Tokenizer):
    """Greedy longest-match over bytes and MERGES; <|bos|> and <|eos|> are control tokens."""

    def __init__(self, merges: Sequence[bytes] = MERGES) -> None:
        self.pieces = [bytes([b]) for b in range(256)] + list(merges)
        self.bos_id, self.eos_id = len(self.pieces), len(self.pieces) + 1
        self.add_bos = True
        self.n_vocab = len(self.pieces) + 2
        self._index = {p: i for i, p in enumerate(self.pieces)}
        self._longest = max(len(p) for p in self.pieces)
        self._special = {"<|bos|>": self.bos_id, "<|eos|>": self.eos_id}

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        ids = [self.bos_id] if add_bos else []
        for part in re.split(r"(<\|bos\|>|<\|eos\|>)", text) if special else [text]:
            if special and part in self._special:
                ids.append(self._special[part])
                continue
            data = part.encode("utf-8")
            i = 0
            while i < len(data):
                for n in range(min(self._longest, len(data) - i), 0, -1):
                    t = self._index.get(data[i : i + n])
                    if t is not None:
                        ids.append(t)
                        i += n
                        break
        return ids

    def token_bytes(self, token: int) -> bytes:
        return self.pieces[token] if token < len(self.pieces) else b""

    def token_text(self, token: int) -> str:
        if token == self.bos_id:
            return "<|bos|>"
        if token == self.eos_id:
            return "<|eos|>"
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return token == self.eos_id

    def is_special(self, token: int) -> bool:
        return token >= len(self.pieces)


class MergedVocabBackend(Backend):
    """A merged token's logit is the byte model's logit for its first byte, plus
    `bonus` for longer pieces: the argmax prefers a merge that starts right and
    may end wrong, so drafts from it are partly accepted, partly rejected."""

    name = "merged-reference"

    def __init__(self, model: ReferenceModel, bonus: float = 0.3) -> None:
        self.inner = ReferenceBackend(model)
        self.tokenizer = MergeTokenizer()
        self.n_ctx = self.inner.n_ctx
        self.bonus = bonus
        tok = self.tokenizer
        self._first = np.array([p[0] for p in tok.pieces])
        self._extra = np.array([bonus * (len(p) > 1) for p in tok.pieces])
        self._lens: list[int] = []  # bytes fed to the byte model per position

    @property
    def n_past(self) -> int:
        return len(self._lens)

    def _bytes(self, t: int) -> list[int]:
        tok = self.tokenizer
        if t == tok.bos_id:
            return [ByteTokenizer.BOS]
        if t == tok.eos_id:
            return [ByteTokenizer.EOS]
        return list(tok.pieces[t])

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        if self.n_past + len(ids) > self.n_ctx:
            raise ContextOverflowError(f"context full: {self.n_past} + {len(ids)} tokens exceed {self.n_ctx}")
        rows = []
        for t in ids:
            b = self._bytes(int(t))
            out = self.inner.eval(b)[-1]
            self._lens.append(len(b))
            row = np.empty(self.tokenizer.n_vocab)
            row[: len(self._first)] = out[self._first] + self._extra
            row[self.tokenizer.bos_id] = -1e9
            row[self.tokenizer.eos_id] = out[ByteTokenizer.EOS]
            rows.append(row)
        n_logits = len(ids) if n_logits is None else n_logits
        return np.array(rows[len(rows) - n_logits :])

    def rollback(self, n_past: int) -> None:
        del self._lens[n_past:]
        self.inner.rollback(sum(self._lens))

    def memory(self) -> dict[str, int]:
        return self.inner.memory()
