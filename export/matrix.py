"""Every format from one source, with the validation table the README quotes.

    python -m edgespec.export.matrix smollm2-135m qwen2.5-coder-0.5b --out exports/

Each source is loaded once; each format is a full `edgespec export` run
(manifest and validation included). Prints a markdown table; ms/token is the
median of 16 one-token decode steps after the validation text, in the export's runtime.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgespec.export.pipeline import ExportPlan, Stages, load_source, run_export

FORMATS = [("onnx", "fp32"), ("onnx", "int8-dynamic"), ("onnx", "int8-weight-only"), ("onnx", "int4"),
           ("onnx", "int4-b128"), ("gguf", "f16"), ("gguf", "q8_0"), ("gguf", "q4_k_m")]


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
    print("| source | format | size MB | top-1 agreement | max abs dlogit | perplexity (source) | ratio | ms/token |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for src in args.sources:
        loaded = load_source(src, args.out / "x", Stages(quiet=True))
        try:
            for (to, quant), k in [(f, k) for f in formats for k in trims]:
                base = Path(src).name.removesuffix(".gguf")  # a store name like qwen2.5-coder-0.5b has no suffix
                name = f"{base}-{to}-{quant}" + (f"-trim{k}" if k else "")
                plan = ExportPlan(src, to, args.out / name, quant, trim_vocab=k, force=True)
                m = run_export(plan, quiet=True, loaded=loaded)
                v = m["validation"]
                label = f"{to} {quant}" + (f" trim {k}" if k else "")
                rows.append({"source": src, "format": label, **m})
                print(f"| {src} | {label} | {m['size_bytes'] / 1e6:.0f} | {v['top1_agreement']:.1%} | "
                      f"{v['max_abs_dlogit']:.2f} | {v['perplexity_export']:.3f} ({v['perplexity_source']:.3f}) | "
                      f"{v['perplexity_ratio']:.3f} | {v['decode_ms']:.1f} |", flush=True)
        finally:
            loaded.close()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
