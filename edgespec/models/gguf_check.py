"""Structural validation of a GGUF file before native code sees it.

llama.cpp trusts offsets and sizes in the file; a truncated download would be
read past its end, and a crafted one can declare more than any machine holds.
We parse the file with the `gguf` package's reader, bounded: every declared
count or length is compared with the bytes left before anything is read, scalar
arrays are one numpy view and string arrays one offsets table, so any file is
judged in about a second whatever it declares. What a well-formed file may
still say that llama.cpp asserts on is checked by gguf_semantics.
"""

from __future__ import annotations

import math
import os
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType, ReaderField

from edgespec.errors import ModelError

GGUF_MAGIC = b"GGUF"
MAX_DIMS = 4  # GGML_MAX_DIMS
# Far above any real model (vocabularies and merge lists stay under 300k entries,
# tensor lists under 10k), low enough that walking them stays well under a second.
MAX_STRINGS = 1 << 20
MAX_ENTRIES = 1 << 16
_U64 = {"I": struct.Struct("=Q"), "S": struct.Struct(">Q" if sys.byteorder == "little" else "<Q")}  # by byte order


class _StringParts(Sequence):
    """The parts GGUFReader lists for a string array ([key parts..., type, count,
    len0, text0, len1, text1, ...]), made on demand from one offsets table rather
    than held as two numpy objects per string: 2M strings would take gigabytes."""

    def __init__(self, head: list[np.ndarray], data: np.ndarray, starts: np.ndarray, ends: np.ndarray):
        self.head, self._data, self._starts, self._ends = head, data, starts, ends

    def __len__(self) -> int:
        return len(self.head) + 2 * len(self._starts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = i + len(self) if i < 0 else i
        if i < len(self.head):
            return self.head[i]
        k, is_text = divmod(i - len(self.head), 2)
        start = int(self._starts[k])
        return self._data[start + 8:int(self._ends[k])] if is_text else self._data[start:start + 8].view(np.uint64)

    def texts(self) -> list[bytes]:
        buf = memoryview(self._data)
        return [bytes(buf[s + 8:e]) for s, e in zip(self._starts.tolist(), self._ends.tolist())]

    def behind(self, key_parts: list[np.ndarray]) -> "_StringParts":
        return _StringParts([*key_parts, *self.head], self._data, self._starts, self._ends)


def string_values(field: ReaderField) -> list[bytes]:
    """The raw bytes of each string of a string-array field (no UTF-8 decoding)."""
    if isinstance(field.parts, _StringParts):
        return field.parts.texts()
    return [field.parts[i].tobytes() for i in field.data]


class _Reader(GGUFReader):
    """GGUFReader that reads nothing a declaration puts past the end of the file.

    It also works on a plain ndarray view of its memmap: slicing an np.memmap runs
    Python code per slice, which made a 150k-token vocabulary take tens of seconds.
    """

    @property
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._data = value.view(np.ndarray)

    def _get(self, offset, dtype, count=1, override_order=None):
        count, itemsize = int(count), np.dtype(dtype).itemsize
        if count < 0 or offset + itemsize * count > len(self._data):
            raise ValueError(f"a field at byte {offset:,} declares {count:,} values, more than the "
                             f"{max(len(self._data) - offset, 0):,} bytes left in the file")
        return super()._get(offset, dtype, count, override_order)

    def _build_fields(self, offs: int, count: int) -> int:
        """GGUFReader's, keeping a string array's parts lazy."""
        _at_most(int(count), MAX_ENTRIES, "metadata entries")
        for _ in range(int(count)):
            start = offs
            key_len, key = self._get_str(offs)
            raw_type = self._get(offs + 8 + len(key), np.uint32)
            offs += 12 + len(key)
            size, parts, idxs, types = self._get_field_parts(offs, raw_type[0])
            head = [key_len, key, raw_type]
            if isinstance(parts, _StringParts):
                parts, idxs = parts.behind(head), range(idxs.start + 3, idxs.stop + 3, 2)
            else:
                parts, idxs = [*head, *parts], [i + 3 for i in idxs]
            self._push_field(ReaderField(start, str(bytes(key), encoding="utf-8"), parts, idxs, types), skip_sum=True)
            offs += size
        return offs

    def _build_tensor_info(self, offs: int, count: int):
        _at_most(int(count), MAX_ENTRIES, "tensors")
        return super()._build_tensor_info(offs, count)

    def _build_tensors(self, start_offs: int, fields: list) -> None:
        for field in fields:  # before the reader views their bytes: a cut download says so
            _, name, _, dims, raw_type, offset = field.parts
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(int(raw_type[0]))]
            end = int(start_offs) + int(offset[0]) + math.prod(int(d) for d in dims) * size // block
            if end > len(self._data):
                raise Truncated(f"tensor {bytes(name).decode(errors='replace')} ends at byte {end:,} "
                                f"but the file has {len(self._data):,}")
        super()._build_tensors(start_offs, fields)

    def _get_tensor_info_field(self, orig_offs: int):
        name_len = int(self._get(orig_offs, np.uint64)[0])
        n_dims = int(self._get(orig_offs + 8 + name_len, np.uint32)[0])
        if n_dims > MAX_DIMS:
            raise ValueError(f"a tensor declares {n_dims} dimensions (GGUF allows {MAX_DIMS})")
        return super()._get_tensor_info_field(orig_offs)

    def _get_field_parts(self, orig_offs: int, raw_type: int):
        if raw_type != GGUFValueType.ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        head = [self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)]
        item, count, offs = GGUFValueType(int(head[0][0])), int(head[1][0]), orig_offs + 12
        if item == GGUFValueType.STRING:
            return self._string_array(head, orig_offs, count)
        nptype = self.gguf_scalar_to_np.get(item)
        if nptype is None:
            raise ValueError(f"an array of {item.name} (GGUF arrays hold scalars or strings)")
        values = self._get(offs, nptype, count)  # one view: contents() flattens it as before
        return 12 + int(values.nbytes), [*head, values], [2], [GGUFValueType.ARRAY, item]

    def _string_array(self, head: list[np.ndarray], orig_offs: int, count: int):
        offs, end = orig_offs + 12, len(self._data)
        _at_most(count, min(MAX_STRINGS, (end - offs) // 8), "strings in an array")
        buf, length = memoryview(self._data), _U64[self.byte_order]
        starts, ends = np.empty(count, np.int64), np.empty(count, np.int64)
        for k in range(count):
            stop = offs + 8 + length.unpack_from(buf, offs)[0] if offs + 8 <= end else end + 1
            if stop > end:
                raise ValueError(f"string {k:,} of an array of {count:,} runs past the end of the file")
            starts[k], ends[k] = offs, stop
            offs = stop
        parts = _StringParts(head, self._data, starts, ends)
        return offs - orig_offs, parts, range(3, 3 + 2 * count, 2), [GGUFValueType.ARRAY, GGUFValueType.STRING]


class Truncated(ValueError):
    pass


def _at_most(count: int, limit: int, what: str) -> None:
    if count > limit:
        raise ValueError(f"the file declares {count:,} {what}; at most {limit:,} fit or are read")


def read_gguf(path: str | os.PathLike) -> GGUFReader:
    """A GGUFReader for a file already checked (the bounded one above)."""
    return _Reader(path, "r")


@dataclass(frozen=True)
class GGUFSummary:
    path: Path
    architecture: str
    n_tensors: int
    n_vocab: int
    size: int
    header_bytes: int  # where tensor data starts: the part a digest of the file's description covers


def check_gguf(path: str | os.PathLike) -> GGUFSummary:
    """Raise ModelError unless `path` is a complete, well-formed GGUF model file
    that llama.cpp's loader would not assert on."""
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
    except Truncated as e:
        raise ModelError(f"{p} is truncated: {e}") from None
    except Exception as e:  # the reader raises many kinds of errors on damaged input
        raise ModelError(f"{p} is a corrupt GGUF file: {e}") from None
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None or len(tokens.data) == 0:
        raise ModelError(f"{p} has no vocabulary (tokenizer.ggml.tokens is missing)")
    if tokens.types[1:] != [GGUFValueType.STRING]:
        raise ModelError(f"{p} is a corrupt GGUF file: tokenizer.ggml.tokens is not a list of strings")
    if not reader.tensors:
        raise ModelError(f"{p} holds no tensors (a vocabulary-only file cannot generate)")
    from edgespec.models.gguf_semantics import check_model  # it reads through this module

    try:
        arch = check_model(reader)
    except ValueError as e:
        raise ModelError(f"{p} is a corrupt GGUF file: {e}") from None
    return reader, GGUFSummary(p, arch, len(reader.tensors), len(tokens.data), size, int(reader.data_offset))
