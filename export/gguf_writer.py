"""GGUF from a Hugging Face checkpoint (llama, qwen2), written with the `gguf`
package's writer; q8_0 and q4_k_m from llama.cpp's own quantizer.

Tensor names come from gguf's own HF-to-GGUF name map. One thing the map does
not do is the rotary layout: llama.cpp's `llama` architecture rotates pairs of
adjacent dimensions, HF's Llama rotates the two halves, so Q and K rows are
permuted for llama (as llama.cpp's convert_hf_to_gguf.py does); qwen2 uses the
halves layout (NEOX) on both sides and is written as is.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
from pathlib import Path
from typing import Callable

import gguf
import numpy as np

from edgespec.export.source import ExportError, kv_heads
from edgespec.models.gguf_check import read_gguf

GGUF_QUANTS = ("f16", "q8_0", "q4_k_m", "q4_0", "tq2_0", "tq1_0")  # TQ: llama.cpp's ternary types


_PER_TOKEN = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")


def copy_fields(w, reader, keep: np.ndarray | None = None, prefix: str = "") -> None:
    """Metadata of `reader` into writer `w` with its value types; with `keep`, per-token
    arrays cut to those ids and special-token ids renumbered (a special token not kept
    is dropped). The writer sets the architecture and alignment itself."""
    new_id = {int(t): i for i, t in enumerate(keep)} if keep is not None else None
    for key, field in reader.fields.items():
        if not key.startswith(prefix) or key.startswith("GGUF.") or key in ("general.architecture",
                                                                             "general.alignment"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if new_id is not None and key in _PER_TOKEN:
            value = [value[int(i)] for i in keep]
        elif new_id is not None and key.endswith("_token_id") and key.startswith("tokenizer."):
            if int(value) not in new_id:
                continue
            value = new_id[int(value)]
        elif new_id is not None and key.endswith(".vocab_size"):
            value = len(keep)
        w.add_key_value(key, value, vtype, sub)


def add_as_is(w, name: str, data: np.ndarray, qtype) -> None:
    """A tensor in its own type: quantized (and bf16) rows come as bytes, and the writer
    derives the shape from their type; float arrays carry their type themselves."""
    w.add_tensor(name, np.ascontiguousarray(data), raw_dtype=qtype if data.dtype == np.uint8 else None)


def write_out(w) -> None:
    """Header, metadata and tensors into the writer's file, then close it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, checkpoint: Path, out: Path, tokenizer_gguf: Path | None = None,
               keep: np.ndarray | None = None, progress: Callable[[float], None] | None = None) -> None:
    """Write `model` (a transformers causal LM) as an f16 GGUF.

    Tokenizer metadata is copied from `tokenizer_gguf` when the source was a GGUF
    (so llama.cpp tokenizes exactly as before), else built from tokenizer.json.
    `keep` (VocabTrim) cuts the vocabulary, token embedding and LM head to those
    ids, in that order (see vocabtrim.py).
    """
    cfg = model.config
    arch = cfg.model_type
    if arch not in ("llama", "qwen2"):
        raise ExportError(f"GGUF export supports llama and qwen2, not {arch!r}")
    n_head, n_kv = cfg.num_attention_heads, kv_heads(cfg)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    w = gguf.GGUFWriter(str(out), arch)
    w.add_name(Path(str(getattr(cfg, "_name_or_path", "") or checkpoint)).name or arch)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(float(getattr(cfg, "rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_rope_dimension_count(head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    n_vocab = cfg.vocab_size
    w.add_vocab_size(n_vocab if keep is None else len(keep))
    if tokenizer_gguf is not None:
        _copy_tokenizer(w, tokenizer_gguf, keep)
    else:
        _tokenizer_from_hf(w, checkpoint, n_vocab, keep)

    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA if arch == "llama" else gguf.MODEL_ARCH.QWEN2,
                                        cfg.num_hidden_layers)
    state = model.state_dict()
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    # llama.cpp reuses token_embd as the head when tied, and computes rotary tables itself
    names = [n for n in state if not (n == "lm_head.weight" and tied) and not n.endswith("rotary_emb.inv_freq")]
    for i, name in enumerate(names):
        t = state[name].detach().float().numpy()
        if arch == "llama" and name.endswith("q_proj.weight"):
            t = _permute(t, n_head)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            t = _permute(t, n_kv)
        if keep is not None and name in ("lm_head.weight", "model.embed_tokens.weight"):
            t = t[keep]
        new = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ExportError(f"no GGUF name for tensor {name!r} of {arch}")
        # 2-D weights in f16, norms and biases in f32 (as llama.cpp's converter does)
        w.add_tensor(new, t.astype(np.float16) if t.ndim == 2 else t.astype(np.float32))
        if progress:
            progress((i + 1) / len(names))
    write_out(w)


def _copy_tokenizer(w, src: Path, keep: np.ndarray | None = None) -> None:
    """Every tokenizer.* key of the source GGUF, with its original value types."""
    copy_fields(w, read_gguf(src), keep, prefix="tokenizer.")


# pre-tokenizer regexes llama.cpp knows by name (its converter identifies them by
# hashing tokenizer output; matching the regex text is the same check done directly)
_PRE_BY_REGEX = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "qwen2",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "llama-bpe",
}


def _tokenizer_from_hf(w, folder: Path, n_vocab: int, keep: np.ndarray | None = None) -> None:
    path = folder / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    model = spec.get("model", {})
    if model.get("type") != "BPE" or "ByteLevel" not in json.dumps(spec.get("decoder") or {}):
        raise ExportError(f"{path}: only byte-level BPE tokenizers are written to GGUF from a checkpoint")
    vocab: dict[str, int] = dict(model["vocab"])
    added = {a["id"]: a for a in spec.get("added_tokens", [])}
    for i, a in added.items():
        vocab[a["content"]] = i
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    types = [gguf.TokenType.UNUSED] * n_vocab
    for tok, i in vocab.items():
        if i < n_vocab:
            tokens[i] = tok
            types[i] = gguf.TokenType.NORMAL
    for i, a in added.items():
        if i < n_vocab:
            types[i] = gguf.TokenType.CONTROL if a.get("special") else gguf.TokenType.USER_DEFINED
    w.add_tokenizer_model("gpt2")
    regexes = re.findall(r'"regex":\s*("(?:[^"\\]|\\.)*")', json.dumps(spec.get("pre_tokenizer") or {}))
    pre = next((_PRE_BY_REGEX.get(json.loads(r)) for r in regexes if json.loads(r) in _PRE_BY_REGEX), None)
    pre_spec = json.dumps(spec.get("pre_tokenizer") or {})
    if pre is None and '"Digits"' in pre_spec and '"individual_digits": true' in pre_spec and "ByteLevel" in pre_spec:
        pre = "smollm"  # SmolLM's digits-then-GPT-2 split
    if pre is None and '"type": "ByteLevel"' in pre_spec and '"use_regex": true' in pre_spec and "Sequence" not in pre_spec:
        pre = "gpt-2"
    w.add_tokenizer_pre(pre or "default")
    special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=n_vocab)
    if keep is not None:
        tokens, types = [tokens[int(i)] for i in keep], [types[int(i)] for i in keep]
        new_id = {int(t): i for i, t in enumerate(keep)}
        special.special_token_ids = {k: new_id[v] for k, v in special.special_token_ids.items() if v in new_id}
    w.add_token_list(tokens)
    w.add_token_types(types)
    special.add_to_gguf(w, quiet=True)


def quantize_gguf(f16: Path, out: Path, quant: str, threads: int | None = None) -> None:
    """llama.cpp's own quantizer (llama_model_quantize) from an f16 GGUF."""
    import llama_cpp as ll

    from edgespec.runtimes.llamacpp import init_backend, default_threads

    ftypes = {"q8_0": ll.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_k_m": ll.LLAMA_FTYPE_MOSTLY_Q4_K_M, "q4_0": ll.LLAMA_FTYPE_MOSTLY_Q4_0,
              "tq2_0": ll.LLAMA_FTYPE_MOSTLY_TQ2_0, "tq1_0": ll.LLAMA_FTYPE_MOSTLY_TQ1_0}
    if quant not in ftypes:
        raise ExportError(f"unknown GGUF quantization {quant!r}; choose one of: {', '.join(GGUF_QUANTS)}")
    init_backend()
    params = ll.llama_model_quantize_default_params()
    params.ftype = ftypes[quant]
    params.nthread = threads or default_threads()
    rc = ll.llama_model_quantize(os.fsencode(f16), os.fsencode(out), ctypes.byref(params))
    if rc != 0:
        raise ExportError(f"llama.cpp's quantizer failed on {f16} (code {rc})")
