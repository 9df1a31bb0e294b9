"""The memory model against measured memory, over targets, drafters and contexts: the
prediction table of docs/memory.md.

    python3 -m edgespec.bench.footprints smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b \\
        --drafters none,auto,smollm2-135m,qwen2.5-coder-0.5b --ctx 512,2048,4096 --json footprints.json

Each cell is one `edgespec profile` in a fresh process (one code prompt, no budget, so
llama.cpp's default loading): the prediction against the peak RSS of the whole process.
A model drafter is paired only with targets larger than itself. `--json` keeps the rows
with the machine and the command, as a record whose table the docs regenerate.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgespec.bench.profile import profile_child
from edgespec.bench.record import FOOTPRINTS, record
from edgespec.drafters import DrafterSpec
from edgespec.models.store import model_file, resolve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="+")
    ap.add_argument("--drafters", default="none,auto")
    ap.add_argument("--ctx", default="512,2048,4096")
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    drafters = args.drafters.split(",")
    models = {s.name: s.model for s in map(DrafterSpec.parse, drafters) if s.uses_model}
    size = {m: model_file(resolve(m)).stat().st_size for m in [*args.targets, *models.values()]}
    rows = []
    for target in args.targets:
        for d in drafters:
            if d in models and size[models[d]] >= size[target]:
                continue  # a drafter model is smaller than its target
            for ctx in args.ctx.split(","):
                r = profile_child(target, ["-d", d, "--ctx", ctx, "-n", str(args.max_tokens), "--limit", "1"])
                rows.append({"target": target, "drafter": d, "ctx": int(ctx),
                             **{k: r.get(k) for k in ("predicted_total", "peak_rss", "error", "error_message")}})
                print(f"{target} {d} ctx {ctx}: " + (r.get("error_message") or
                      f"predicted {r['predicted_total'] / 1e6:.0f} MB, measured {r['peak_rss'] / 1e6:.0f} MB"),
                      flush=True)
    if args.json:
        args.json.write_text(json.dumps(record(rows, ", ".join(args.targets), "python3 -m edgespec.bench.footprints",
                                               kind=FOOTPRINTS), indent=2))
    print("\n".join(footprint_lines(rows)))


def footprint_lines(rows: list[dict]) -> list[str]:
    """Predicted / measured memory per target and drafter, a column per context."""
    ctxs = list(dict.fromkeys(r["ctx"] for r in rows))
    out = ["| target | drafter | " + " | ".join(f"context {c}" for c in ctxs) + " |", "|---|---|" + "---|" * len(ctxs)]
    cells: dict[tuple[str, str], dict[int, str]] = {}
    for r in rows:
        cells.setdefault((r["target"], r["drafter"]), {})[r["ctx"]] = (
            r["error_message"] if r.get("error_message") else
            f"{r['predicted_total'] / 1e6:.0f} / {r['peak_rss'] / 1e6:.0f} MB ({r['error']:+.1%})")
    for (target, drafter), by_ctx in cells.items():
        out.append(f"| {target} | {drafter} | " + " | ".join(by_ctx.get(c, "-") for c in ctxs) + " |")
    return out


def table(rec: dict) -> list[str]:
    return footprint_lines(rec["rows"])


if __name__ == "__main__":
    main()
