"""Every format from one source, validated: the export table of docs/export.md.

    python3 -m edgespec.bench.exports smollm2-135m qwen2.5-coder-0.5b --out exports/ --json exports.json

Each source is loaded once; each format is a full `edgespec export` run (manifest and
validation included), kept under `--out`. ms/token is the median of 32 one-token decode
steps after the validation text (and 4 untimed ones), in the export's own runtime. `--json` keeps the rows
with the machine and the command, as a bench record: `edgespec bench --markdown FILE`
prints the table, and the docs' copy is regenerated from it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgespec.bench.record import EXPORTS, record
from edgespec.export.pipeline import ExportPlan, Stages, load_source, run_export

FORMATS = [("onnx", "fp32"), ("onnx", "int8-dynamic"), ("onnx", "int8-weight-only"), ("onnx", "int4"),
           ("onnx", "int4-f32"), ("onnx", "int4-b128"), ("onnx", "int4-b128-f32"),
           ("gguf", "f16"), ("gguf", "q8_0"), ("gguf", "q4_k_m")]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--formats", default=",".join(f"{t}:{q}" for t, q in FORMATS))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--trim", default="", help="comma-separated K values: also export VocabTrim'd variants")
    args = ap.parse_args(argv)
    formats = [tuple(f.split(":")) for f in args.formats.split(",")]
    trims = [None] + [int(k) for k in args.trim.split(",") if k.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    print("\n".join(VALIDATION_HEADER), flush=True)
    for src in args.sources:
        loaded = load_source(src, args.out / "x", Stages(quiet=True))
        try:
            for (to, quant), k in [(f, k) for f in formats for k in trims]:
                rows.append(_export_row(src, to, quant, k, args.out, loaded))
                print(validation_line(rows[-1]), flush=True)
                if args.json:  # after every row: an interrupted run keeps what it measured
                    args.json.write_text(json.dumps(_record(rows, args), indent=2))
        finally:
            loaded.close()


def _export_row(src: str, to: str, quant: str, k: int | None, out: Path, loaded) -> dict:
    base = Path(src).name.removesuffix(".gguf")  # a store name like qwen2.5-coder-0.5b has no suffix
    name = f"{base}-{to}-{quant}" + (f"-trim{k}" if k else "")
    m = run_export(ExportPlan(src, to, out / name, quant, trim_vocab=k, force=True), quiet=True, loaded=loaded)
    v = m["validation"]
    return {"source": src, "format": f"{to} {quant}" + (f" trim {k}" if k else ""), "size_mb": round(m["size_bytes"] / 1e6),
            **{key: v[key] for key in ("top1_agreement", "max_abs_dlogit", "perplexity_export", "perplexity_source",
                                       "perplexity_ratio", "decode_ms")}}


def _record(rows: list[dict], args: argparse.Namespace) -> dict:
    return record(rows, ", ".join(args.sources), "python3 -m edgespec.bench.exports", kind=EXPORTS)


VALIDATION_HEADER = ["| source | format | size MB | top-1 agreement | max abs dlogit | perplexity (source) | ratio "
                     "| ms/token |", "|---|---|---:|---:|---:|---:|---:|---:|"]


def validation_line(r: dict) -> str:
    return (f"| {r['source']} | {r['format']} | {r['size_mb']} | {r['top1_agreement']:.1%} | "
            f"{r['max_abs_dlogit']:.2f} | "
            f"{r['perplexity_export']:.3f} ({r['perplexity_source']:.3f}) | {r['perplexity_ratio']:.3f} | "
            f"{r['decode_ms']:.1f} |")


def table(rec: dict) -> list[str]:
    """An export validation record's table: a row per export."""
    return VALIDATION_HEADER + [validation_line(r) for r in rec["rows"]]


if __name__ == "__main__":
    main()
