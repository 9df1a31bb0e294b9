"""`edgespec export`: source -> checkpoint -> (VocabTrim) -> ONNX or GGUF ->
quantized -> validated, with a manifest. Work happens in a scratch folder beside the
output, renamed into place only when everything succeeded (files.py), so an
interrupted or failed export never leaves a half-written model where a model is
expected, and --force never leaves neither the old export nor the new one."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from edgespec.export.gguf_writer import GGUF_QUANTS, quantize_gguf, write_gguf
from edgespec.export.onnx_attention import fold_grouped_query_attention, fuse_group_query_attention
from edgespec.export.onnx_export import ONNX_QUANTS, export_onnx, quantize_onnx
from edgespec.export.source import ExportError, Source, kv_heads, load_model, open_source, stage_checkpoint
from edgespec.export.ternary_export import TERNARY_FILE, write_ternary
from edgespec.export.validate import compare, export_logits, source_logits, validation_text
from edgespec.export.vocabtrim import plan_trim, trim_onnx, write_input_embedding, write_vocab_map
from edgespec.files import replace_folder, scratch_beside, sha256_file
from edgespec.models.export_check import MANIFEST, file_digests
from edgespec.runtimes.onnxruntime import sliding_window

TERNARY_QUANTS = ("b1.58",)  # BitNet b1.58 absmean ternary, int8 activations


@dataclass
class ExportPlan:
    source: str
    to: str  # "onnx" or "gguf"
    out: Path
    quant: str | None = None
    trim_vocab: int | None = None
    calib: Sequence[Path] = ()
    force: bool = False
    threads: int | None = None
    validate: bool = True

    def check(self) -> None:
        """Everything that can be refused before loading a model."""
        if self.to not in ("onnx", "gguf", "ternary"):
            raise ExportError(f"--to must be onnx, gguf or ternary, not {self.to!r}")
        quants = {"onnx": ONNX_QUANTS, "gguf": GGUF_QUANTS, "ternary": TERNARY_QUANTS}[self.to]
        self.quant = self.quant or quants[0]
        if self.quant not in quants:
            raise ExportError(f"--quant {self.quant} does not apply to {self.to}; choose one of: {', '.join(quants)}")
        if self.trim_vocab is not None and self.to == "ternary":
            raise ExportError("--trim-vocab applies to onnx and gguf drafters, not to ternary exports")
        if self.trim_vocab is not None and self.trim_vocab < 1:
            raise ExportError(f"--trim-vocab must be a positive number of tokens, not {self.trim_vocab}")
        for c in self.calib:
            if not Path(c).is_file():
                raise ExportError(f"calibration file not found: {c}")
        out = Path(self.out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            self._check_replaceable(out)
        parent = out.resolve().parent
        if not parent.is_dir():
            raise ExportError(f"cannot write {out}: folder {parent} does not exist")
        try:  # try, rather than os.access: root passes access checks on read-only file systems
            os.rmdir(tempfile.mkdtemp(prefix=f".{out.name}.probe-", dir=parent))
        except OSError:
            raise ExportError(f"cannot write {out}: folder {parent} is not writable") from None

    def _check_replaceable(self, out: Path) -> None:
        # --force replaces an earlier export, never a folder of the user's own
        if not self.force:
            raise ExportError(f"{out} already exists; choose another output or pass --force")
        if not (out / MANIFEST).is_file():
            raise ExportError(f"{out} is not an edgespec export (it has no {MANIFEST}); --force replaces "
                              "only an earlier export, so choose another output")
        source = Path(self.source).expanduser()
        if source.exists() and (source.resolve() == out.resolve() or out.resolve() in source.resolve().parents):
            raise ExportError(f"{out} holds the source of this export; write the export somewhere else")


@dataclass
class Stages:
    """Per-stage progress on the console (rich), with timings kept for the manifest."""

    quiet: bool = False
    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        from rich.console import Console

        console = Console(stderr=True)
        t0 = time.perf_counter()
        if self.quiet:
            yield
        else:
            with console.status(f"{name}…"):
                yield
        dt = self.seconds[name] = time.perf_counter() - t0
        if not self.quiet:
            console.print(f"[green]✓[/] {name} [dim]({dt:.1f} s)[/]")


def source_sha256(source: Source) -> str:
    """sha256 of a GGUF file; for a checkpoint, of its weight files' digests in name order."""
    if source.kind == "gguf":
        return sha256_file(source.path)
    files = sorted([*source.path.glob("*.safetensors"), *source.path.glob("*.bin")])
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + sha256_file(f).encode())
    return h.hexdigest()


@dataclass
class Loaded:
    """A source loaded once in transformers, reusable for several exports."""

    source: Source
    sha256: str
    _model: object
    tokenizer: object
    checkpoint: Path
    scratch: Path

    @property
    def model(self):
        """The source in transformers (loaded again if `release` dropped it)."""
        if self._model is None:
            self._model, _ = load_model(self.source)
        return self._model

    def release(self) -> None:
        """Drop the model while a stage needs its memory: quantizing a 1.5B model's float32
        ONNX graph beside the float32 model itself does not fit in 24 GB."""
        self._model = None
        gc.collect()

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def load_source(src: str, near: Path, stages: Stages) -> Loaded:
    with stages.stage("checking the source"):
        source = open_source(src)
        digest = source_sha256(source)
    scratch = scratch_beside(near)
    try:
        with stages.stage("loading the source in transformers"):
            model, tok = load_model(source)
            checkpoint = stage_checkpoint(source, model, tok, scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return Loaded(source, digest, model, tok, checkpoint, scratch)


def _reference_logits(model, tok) -> tuple[list[int], object]:
    """The validation text's ids (at most 512) and the source's logits for them."""
    ids = tok(validation_text(), add_special_tokens=False)["input_ids"]
    ids = ids[: min(512, model.config.max_position_embeddings - 16)]
    return ids, source_logits(model, ids)


def run_export(plan: ExportPlan, quiet: bool = False, loaded: Loaded | None = None) -> dict:
    """Run the plan; returns the manifest written beside the model.

    `loaded` reuses a source already in memory (several formats from one source).
    """
    plan.check()
    stages = Stages(quiet)
    out = Path(plan.out)
    own = loaded is None
    if own:
        loaded = load_source(plan.source, out, stages)
    source, model, tok, checkpoint = loaded.source, loaded.model, loaded.tokenizer, loaded.checkpoint
    scratch = scratch_beside(out)
    try:
        result = scratch / "result"
        result.mkdir()
        keep, trim, ternary_info, gqa_folded, gqa_fused = None, None, None, None, None
        # what the manifest says of the source, read before quantizing ONNX drops the model
        vocab_size, parameters = int(model.config.vocab_size), int(sum(p.numel() for p in model.parameters()))
        if plan.trim_vocab is not None:
            with stages.stage(f"counting token use for VocabTrim (K = {plan.trim_vocab})"):
                keep, trim = plan_trim(model, tok, plan.trim_vocab, plan.calib)
            # inputs stay full-vocabulary ids: ONNX keeps its embedding, GGUF reads input_embd.gguf
            trim.update(ids=keep.tolist(), inputs_trimmed=False, vocab_size=vocab_size)
            write_vocab_map(result, keep, inputs_trimmed=False)
        reference = None
        if plan.validate:
            with stages.stage("reading the validation text with the source"):
                reference = _reference_logits(model, tok)
        if plan.to == "onnx":
            fp32 = scratch / "fp32" if plan.quant != "fp32" else result
            with stages.stage("exporting ONNX (optimum, with KV cache)"):
                export_onnx(checkpoint, fp32, model)
            with stages.stage("folding grouped-query attention (the KV cache read unrepeated)"):
                gqa_folded = fold_grouped_query_attention(fp32 / "model.onnx", model.config.num_attention_heads,
                                                          kv_heads(model.config))
            if not sliding_window(model.config.to_dict()):  # GroupQueryAttention would need its window set
                with stages.stage("fusing attention (GroupQueryAttention, the KV cache written in place)"):
                    gqa_fused = fuse_group_query_attention(fp32 / "model.onnx", model.config.num_attention_heads,
                                                           kv_heads(model.config))
            if keep is not None:
                with stages.stage(f"trimming the LM head to {len(keep)} rows"):
                    trim_onnx(fp32 / "model.onnx", keep)
            if plan.quant != "fp32":
                model = None
                loaded.release()  # the float32 graph and its quantized copy need the room
                with stages.stage(f"quantizing ONNX to {plan.quant}"):
                    quantize_onnx(fp32, result, plan.quant)
            model_file = result / "model.onnx"
        elif plan.to == "ternary":
            with stages.stage("ternarizing and packing the block projections (TLMM, G = 3)"):
                ternary_info = write_ternary(model, checkpoint, result)
            model_file = result / TERNARY_FILE
        else:
            f16 = result / "model.gguf" if plan.quant == "f16" else scratch / "model-f16.gguf"
            with stages.stage("writing GGUF f16"):
                write_gguf(model, checkpoint, f16, tokenizer_gguf=source.path if source.kind == "gguf" else None,
                           keep=keep)
            if plan.quant != "f16":
                with stages.stage(f"quantizing GGUF to {plan.quant} (llama.cpp)"):
                    quantize_gguf(f16, result / "model.gguf", plan.quant, plan.threads)
            if keep is not None:
                with stages.stage("writing the full input embedding beside the trimmed model"):
                    write_input_embedding(result, model.get_input_embeddings().weight.detach().float().numpy(),
                                          source.arch, exact=plan.quant == "f16")
            model_file = result / "model.gguf"
        validation = None
        if reference is not None:
            with stages.stage("validating against the source"):
                ids, expected = reference
                got, decode_ms = export_logits(result, ids, plan.threads, trim, decode_steps=32)
                validation = {**compare(expected, got, ids, trim), "decode_ms": decode_ms}
        manifest = {
            "source": str(source.path.resolve()),
            "source_kind": source.kind,
            "source_sha256": loaded.sha256,
            "architecture": source.arch,
            "format": plan.to,
            "quantization": plan.quant,
            "model_file": model_file.name,
            "vocab_size": vocab_size,
            "trim_k": plan.trim_vocab,
            "trim": {k: v for k, v in trim.items() if k != "ids"} if trim else None,
            "parameters": parameters,
            "size_bytes": sum(p.stat().st_size for p in result.rglob("*") if p.is_file()),
            "files": file_digests(result),  # compared before every load (export_check)
            "validation": validation,
            "ternary": ternary_info,
            "gqa_folded": gqa_folded,  # ONNX: repeated K/V tensors folded into the queries (2 per layer)
            "gqa_fused": gqa_fused,  # ONNX: layers whose attention is one GroupQueryAttention (cache in place)
            "stage_seconds": stages.seconds,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (result / MANIFEST).write_text(json.dumps(manifest, indent=2))
        replace_folder(result, out)
        return manifest
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if own:
            loaded.close()
