"""A tiny llama GGUF written with the gguf package alone (no torch): random f32
weights, a byte-level BPE vocabulary. Small enough to mutate and load thousands
of times in a fuzz run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFValueType, GGUFWriter


def byte_tokens() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, as byte-level BPE vocabularies spell them."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def write(path: Path, n_layer: int = 2, block_count: int | None = None, tokens: list[str] | None = None,
          n_embd: int = 32, n_head: int = 4, n_head_kv: int = 2, n_ff: int = 64, seed: int = 0,
          tokenizer: str = "gpt2", metadata: dict | None = None) -> Path:
    """`tokenizer` names tokenizer.ggml.model; `metadata` adds or overrides keys
    (an int is written as uint32, a float as float32, a str as a string)."""
    rng = np.random.default_rng(seed)
    tokens = tokens or [*byte_tokens(), "Ġt", "he", "<|endoftext|>"]
    n_vocab = len(tokens)
    head = n_embd // n_head
    w = GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(block_count if block_count is not None else n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model(tokenizer)
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    w.add_token_merges(["Ġ t", "h e"])
    w.add_bos_token_id(n_vocab - 1)
    w.add_eos_token_id(n_vocab - 1)
    for key, value in (metadata or {}).items():
        _add(w, key, value)

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))

    t("token_embd.weight", n_vocab, n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    t("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.attn_q.weight", n_embd, n_embd)
        t(f"blk.{i}.attn_k.weight", n_head_kv * head, n_embd)
        t(f"blk.{i}.attn_v.weight", n_head_kv * head, n_embd)
        t(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _add(w: GGUFWriter, key: str, value) -> None:
    kind = {bool: GGUFValueType.BOOL, int: GGUFValueType.UINT32, float: GGUFValueType.FLOAT32, str: GGUFValueType.STRING}
    w.add_key_value(key, value, GGUFValueType.ARRAY if isinstance(value, list) else kind[type(value)],
                    sub_type=kind[type(value[0])] if isinstance(value, list) and value else None)
