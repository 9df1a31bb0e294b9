"""What a well-formed GGUF file may still declare that llama.cpp asserts on.

llama.cpp's loader refuses most structural damage with an error, but meets
semantic nonsense with GGML_ASSERT or an uncaught C++ exception, which kills the
whole process (a desktop app, the server). Each rule below mirrors one such
assertion in the llama.cpp that llama-cpp-python vendors; what cannot be derived
here with confidence is left to the child-process load in gguf_probe.
"""

from __future__ import annotations

import re

from gguf import GGUFReader

from edgespec.models.gguf_check import string_values

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS: more aborts the process
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS (llama-hparams.h)
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # LLAMA_ROPE_SCALING_TYPES
SPECIAL_ID = re.compile(r"tokenizer\.ggml\.\w+_token_id$")
BYTE_FALLBACK_MODELS = {"llama": "SPM", "t5": "UGM"}  # tokenizer.ggml.model values whose tokenizers spell any byte


def check_model(reader: GGUFReader) -> str:
    """The file's architecture, or ValueError naming the first rule it breaks."""
    arch = str(_value(reader, "general.architecture", "unknown"))
    tokens = string_values(reader.fields["tokenizer.ggml.tokens"])
    _check_vocabulary(tokens)
    _check_special_ids(reader, len(tokens))
    _check_byte_fallback(reader, tokens)
    _check_layers(reader, arch)
    _check_heads(reader, arch)
    _check_experts(reader, arch)
    rope = _value(reader, f"{arch}.rope.scaling.type", "linear")
    if rope not in ROPE_SCALING_TYPES:
        raise ValueError(f"{arch}.rope.scaling.type is {str(rope)[:40]!r} (llama.cpp knows {', '.join(ROPE_SCALING_TYPES)})")
    return arch


def _value(reader: GGUFReader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    try:
        return field.contents()
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{key} cannot be read") from None


def _ints(reader: GGUFReader, key: str, default: int | None = None) -> list[int] | None:
    """A count given once or per layer, as a list (None when absent and no default)."""
    v = _value(reader, key, default)
    if v is None:
        return None
    values = v if isinstance(v, list) else [v]
    if not values or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x == int(x) for x in values):
        raise ValueError(f"{key} is not a count")
    return [int(x) for x in values]


def _check_vocabulary(tokens: list[bytes]) -> None:
    # llama.cpp aborts (GGML_ASSERT id_to_token.size() == token_to_id.size()) when two
    # tokens share a text; it first renames an empty token i to "[EMPTY_i]"
    seen: dict[bytes, int] = {}
    for i, text in enumerate(tokens):
        text = text or f"[EMPTY_{i}]".encode()
        if text in seen:
            raise ValueError(f"tokens {seen[text]} and {i} are both {text[:40]!r}")
        seen[text] = i


def _check_special_ids(reader: GGUFReader, n_vocab: int) -> None:
    for key in reader.fields:
        if SPECIAL_ID.match(key):
            bad = [i for i in _ints(reader, key) if not 0 <= i < n_vocab]
            if bad:
                raise ValueError(f"{key} is {bad[0]}, outside the vocabulary of {n_vocab:,} tokens")


def _check_byte_fallback(reader: GGUFReader, tokens: list[bytes]) -> None:
    # SPM and UGM tokenizers spell a character they lack as byte tokens <0xXX> (or the
    # byte itself); llama.cpp throws std::out_of_range, uncaught, when one is missing
    kind = BYTE_FALLBACK_MODELS.get(str(_value(reader, "tokenizer.ggml.model", "")))
    if kind is None:
        return
    have = set(tokens)
    for b in range(256):
        if f"<0x{b:02X}>".encode() not in have and bytes([b]) not in have:
            raise ValueError(f"the {kind} vocabulary has no byte token <0x{b:02X}>, so some text cannot be spelled")


def _check_layers(reader: GGUFReader, arch: str) -> None:
    n = _ints(reader, f"{arch}.block_count")
    if n is None:
        return  # an architecture without layers in its metadata: llama.cpp says what it misses
    n_layer = n[0]
    if not 0 < n_layer <= MAX_LAYERS:
        raise ValueError(f"{arch}.block_count is {n_layer} (llama.cpp allows 1 to {MAX_LAYERS})")
    names = {t.name for t in reader.tensors}
    if any(x.startswith("blk.") for x in names) and not any(x.startswith(f"blk.{n_layer - 1}.") for x in names):
        raise ValueError(f"{arch}.block_count is {n_layer} but there are no tensors for layer {n_layer - 1}")
    nextn = (_ints(reader, f"{arch}.nextn_predict_layers", 0) or [0])[0]
    if not 0 <= nextn < n_layer:
        raise ValueError(f"{arch}.nextn_predict_layers is {nextn}, not fewer than the {n_layer} blocks")


def _check_heads(reader: GGUFReader, arch: str) -> None:
    # grouped-query attention shares each KV head among head_count / head_count_kv
    # query heads; llama.cpp asserts the division is exact when it builds the graph
    heads = _ints(reader, f"{arch}.attention.head_count")
    if heads is None:
        return
    kv = _ints(reader, f"{arch}.attention.head_count_kv") or heads
    n = max(len(heads), len(kv))
    if {len(heads), len(kv)} - {1, n}:
        raise ValueError(f"{arch}.attention.head_count and head_count_kv give different layer counts")
    for i in range(n):
        h, k = heads[min(i, len(heads) - 1)], kv[min(i, len(kv) - 1)]
        if h < 0 or k < 0 or (k and (k > h or h % k)):
            raise ValueError(f"{arch}.attention.head_count {h} is not a multiple of head_count_kv {k}")


def _check_experts(reader: GGUFReader, arch: str) -> None:
    n_expert = (_ints(reader, f"{arch}.expert_count", 0) or [0])[0]
    used = max(_ints(reader, f"{arch}.expert_used_count", 0) or [0])
    groups = (_ints(reader, f"{arch}.expert_group_count", 0) or [0])[0]
    groups_used = (_ints(reader, f"{arch}.expert_group_used_count", 0) or [0])[0]
    if not 0 <= n_expert <= MAX_EXPERTS:
        raise ValueError(f"{arch}.expert_count is {n_expert} (llama.cpp allows 0 to {MAX_EXPERTS})")
    if n_expert == 0 and used:
        raise ValueError(f"{arch}.expert_used_count is {used} in a model without experts")
    if n_expert == 0 and groups:
        raise ValueError(f"{arch}.expert_group_count is {groups} in a model without experts")
    if n_expert and not 0 < used <= n_expert:
        raise ValueError(f"{arch}.expert_used_count is {used}; it must be 1 to expert_count ({n_expert})")
    if n_expert and groups and not (groups < n_expert and (groups == 1 or (n_expert % groups == 0
                                                                            and 0 < groups_used < groups))):
        raise ValueError(f"{arch}.expert_group_count {groups} does not divide {n_expert} experts "
                         f"with {groups_used} groups used")
