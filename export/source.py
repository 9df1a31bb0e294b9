"""Export sources: a Hugging Face checkpoint folder, or a GGUF file dequantized
through transformers' `gguf_file=` support."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import EdgespecError, ModelError
from edgespec.models.gguf_check import check_gguf, read_gguf
from edgespec.models.store import MODELS, resolve

# what the GGUF writer maps (ONNX export through optimum would take more, but the
# exports are validated against these paths only)
SUPPORTED_ARCHS = ("llama", "qwen2")


class ExportError(EdgespecError):
    """An export that cannot be done as asked."""


@dataclass
class Source:
    path: Path  # folder (HF) or file (GGUF)
    kind: str  # "hf" or "gguf"
    arch: str

    @property
    def folder(self) -> Path:
        return self.path if self.kind == "hf" else self.path.parent

    @property
    def gguf_file(self) -> str | None:
        return self.path.name if self.kind == "gguf" else None


def open_source(src: str | os.PathLike) -> Source:
    """Check what SRC is before anything heavy is loaded."""
    p = Path(src).expanduser()
    if str(src) in MODELS and not p.exists():
        p = resolve(str(src))
    if not p.exists():
        raise ModelError(f"export source not found: {p}")
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise ExportError(f"{p} is neither a Hugging Face checkpoint folder nor a .gguf file")

        arch = check_gguf(p).architecture
        _check_arch(arch, p)
        return Source(p, "gguf", arch)
    cfg = p / "config.json"
    if not cfg.is_file():
        raise ExportError(f"{p} has no config.json: not a Hugging Face checkpoint folder")
    try:
        arch = json.loads(cfg.read_text()).get("model_type", "?")
    except ValueError as e:
        raise ExportError(f"{cfg} is not valid JSON ({e})") from None
    _check_arch(arch, p)
    if not (p / "tokenizer.json").is_file():
        raise ExportError(f"{p} has no tokenizer.json: export needs the model's (fast) tokenizer files")
    if not any(p.glob("*.safetensors")) and not any(p.glob("*.bin")):
        raise ExportError(f"{p} holds no weights (*.safetensors or *.bin)")
    return Source(p, "hf", arch)


def _check_arch(arch: str, p: Path) -> None:
    if arch not in SUPPORTED_ARCHS:
        raise ExportError(f"{p}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHS)})")


def kv_heads(config) -> int:
    """KV heads of a transformers config; one without `num_key_value_heads` has one per query head."""
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads


def load_model(source: Source):
    """(model, tokenizer) in float32 on the CPU, as transformers loads them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    kw = {"gguf_file": source.gguf_file} if source.gguf_file else {}
    # the GGUF loader's own tqdm bar ignores transformers' progress setting: the caller shows progress
    import transformers.modeling_gguf_pytorch_utils as gguf_loader

    bar = gguf_loader.tqdm
    gguf_loader.tqdm = functools.partial(bar, disable=True)
    try:
        tok = AutoTokenizer.from_pretrained(source.folder, **kw)
        model = AutoModelForCausalLM.from_pretrained(source.folder, torch_dtype=torch.float32, **kw)
    except (OSError, ValueError, KeyError) as e:
        raise ExportError(f"transformers could not load {source.path}: {str(e).splitlines()[0]}") from None
    finally:
        gguf_loader.tqdm = bar
    model.eval()
    return model, tok


def stage_checkpoint(source: Source, model, tok, workdir: Path) -> Path:
    """A Hugging Face folder of the source (GGUF sources are written out dequantized)."""
    if source.kind == "hf":
        return source.path
    out = workdir / "checkpoint"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    # transformers' GGUF tokenizer conversion turns BOS on and names <|im_start|> as EOS for
    # SmolLM2, whatever the file says: keep the file's own choices, so every export
    # tokenizes and stops as the source did

    fields = read_gguf(source.path).fields
    cfg_path = out / "tokenizer_config.json"
    if cfg_path.is_file():
        cfg = json.loads(cfg_path.read_text())
        if "tokenizer.ggml.add_bos_token" in fields:
            cfg["add_bos_token"] = bool(fields["tokenizer.ggml.add_bos_token"].contents())
        for key, name in (("tokenizer.ggml.bos_token_id", "bos_token"), ("tokenizer.ggml.eos_token_id", "eos_token")):
            if key in fields:
                cfg[name] = tok.convert_ids_to_tokens(int(fields[key].contents()))
        cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    return out
