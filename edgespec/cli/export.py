"""edgespec export: a checkpoint to ONNX, GGUF or ternary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from edgespec.cli.common import ThreadsOpt, app, caused_by_interrupt, fail, out, user_errors


@app.command()
@user_errors
def export(
    source: str = typer.Argument(..., help="Hugging Face checkpoint folder, .gguf file, or model-store name."),
    to: str = typer.Option(..., "--to", help="onnx, gguf, or ternary (packed TLMM weights for the fpga-sim backend)."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder to create for the exported model."),
    quant: Optional[str] = typer.Option(
        None, "--quant", "-q", help="onnx: fp32 (default), int8 (= int8-dynamic), int8-weight-only, int4 (= int4-b32), int4-b128 (int8 compute), int4-f32, int4-b128-f32 (float32 compute: cheaper batches); gguf: f16 (default), q8_0, q4_k_m, q4_0, tq2_0, tq1_0 (llama.cpp's ternary types); ternary: b1.58."),
    trim_vocab: Optional[int] = typer.Option(None, "--trim-vocab", help="VocabTrim: keep the K most used tokens in the LM head."),
    calib: list[Path] = typer.Option([], "--calib", help="Text file(s) whose tokens the target uses (default: its own generations)."),
    validate: bool = typer.Option(True, "--validate/--no-validate", help="Compare with the source on a fixed text."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output folder."),
    threads: Optional[int] = ThreadsOpt,
    json_out: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Export a model to ONNX, GGUF or ternary, quantized, optionally with a trimmed vocabulary.

    Example: edgespec export smollm2-135m --to onnx -q int4 -o smollm2-int4
    (--to ternary writes BitNet b1.58 weights packed for table-lookup matmul: the fpga-sim backend runs it)
    """
    from edgespec.export.pipeline import ExportPlan, run_export

    plan = ExportPlan(source, to, output, quant, trim_vocab, calib, force, threads, validate)
    try:
        manifest = run_export(plan, quiet=json_out)
    except ImportError as e:
        if caused_by_interrupt(e):
            raise  # Ctrl-C while a native module loaded: user_errors says "interrupted"
        if e.name is None:  # a module is there but failed to load: not a missing extra
            fail(f"export could not load a module it needs: {str(e).splitlines()[0]}")
        fail(f"export needs the export extras ({e.name} is missing): pip install 'edgespec[export]'")
    if json_out:
        out.print_json(json.dumps(manifest))
        return
    v = manifest.get("validation") or {}
    out.print(f"wrote {output}: {manifest['format']} {manifest['quantization']}, "
              f"{manifest['size_bytes'] / 1e6:.0f} MB, {manifest['parameters'] / 1e6:.0f}M parameters")
    if v:
        out.print(f"vs source on {v['tokens']} tokens: top-1 agreement {v['top1_agreement']:.1%}, "
                  f"max |Δlogit| {v['max_abs_dlogit']:.3f}, perplexity {v['perplexity_export']:.2f} "
                  f"(source {v['perplexity_source']:.2f}, x{v['perplexity_ratio']:.3f})"
                  + (f"; decodes one token in {v['decode_ms']:.1f} ms" if v.get("decode_ms") else ""))
