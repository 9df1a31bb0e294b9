"""The regression set of crafted GGUF files: each one is written from the tiny
model by a recipe here (model files are never committed) and must be refused
with the line fragment beside it. Every semantic one aborted llama.cpp 0.3.36's
process when loaded unchecked; every structural one made the validator itself
run for minutes or take gigabytes.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable

import tiny_gguf

SPM_WITHOUT_BYTES = ["<unk>", "<s>", "</s>", "▁", "h", "e", "l", "o", "▁h", "he", "ll"]


def _tiny(**kwargs) -> Callable[[Path], Path]:
    return lambda path: tiny_gguf.write(path, **kwargs)


def header_only(n_kv: int, kvs: bytes = b"", n_tensors: int = 0) -> Callable[[Path], Path]:
    def write(path: Path) -> Path:
        path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kvs)
        return path
    return write


def array(key: str, item_type: int, count: int, payload: bytes = b"") -> bytes:
    name = key.encode()
    return struct.pack("<Q", len(name)) + name + struct.pack("<IIQ", 9, item_type, count) + payload


UINT8, STRING = 0, 8
CRAFTED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "duplicate tokens": (_tiny(tokens=[*tiny_gguf.byte_tokens(), "he", "he", "<|endoftext|>"]),
                         "tokens 256 and 257 are both b'he'"),
    "an empty token beside its renaming": (_tiny(tokens=[*tiny_gguf.byte_tokens(), "", "[EMPTY_256]", "<|endoftext|>"]),
                                           "tokens 256 and 257 are both b'[EMPTY_256]'"),
    "block_count over llama.cpp's limit": (_tiny(block_count=1000), "block_count is 1000"),
    "2000 experts": (_tiny(metadata={"llama.expert_count": 2000, "llama.expert_used_count": 2}),
                     "expert_count is 2000"),
    "experts used without experts": (_tiny(metadata={"llama.expert_used_count": 2}),
                                     "expert_used_count is 2 in a model without experts"),
    "an unknown rope scaling type": (_tiny(metadata={"llama.rope.scaling.type": "bogus"}),
                                     "rope.scaling.type is 'bogus'"),
    "more nextn layers than blocks": (_tiny(metadata={"llama.nextn_predict_layers": 5}),
                                      "nextn_predict_layers is 5"),
    "query heads not a multiple of kv heads": (_tiny(n_head=4, n_head_kv=3),
                                               "head_count 4 is not a multiple of head_count_kv 3"),
    "an SPM vocabulary without byte tokens": (_tiny(tokens=SPM_WITHOUT_BYTES, tokenizer="llama"),
                                              "no byte token <0x00>"),
    "an end-of-text id outside the vocabulary": (_tiny(metadata={"tokenizer.ggml.eos_token_id": 5000}),
                                                 "eos_token_id is 5000, outside the vocabulary"),
    "2^40 bytes declared in 116": (header_only(1, array("x", UINT8, 1 << 40)), "declares 1,099,511,627,776 values"),
    "2.5M empty strings": (header_only(1, array("x", STRING, 2_500_000, bytes(8 * 2_500_000))),
                           "declares 2,500,000 strings in an array"),
    "2^62 metadata entries": (header_only(1 << 62), "declares 4,611,686,018,427,387,904 metadata entries"),
    "2^62 tensors": (header_only(0, n_tensors=1 << 62), "declares 4,611,686,018,427,387,904 tensors"),
}
