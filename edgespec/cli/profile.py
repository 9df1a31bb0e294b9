"""edgespec profile: predicted and measured memory of each configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from edgespec.cli.common import (BudgetOpt, CtxOpt, DeviceOpt, DrafterOpt, MaxDraftOpt, ThreadsOpt, app, err, fail, out,
                                 user_errors)
from edgespec.models.store import DEFAULT_MODEL, model_file, resolve


@app.command()
@user_errors
def profile(
    model: str = typer.Argument(DEFAULT_MODEL, help="Model-store name or .gguf file."),
    drafter: str = DrafterOpt,
    memory_budget: Optional[str] = BudgetOpt,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="JSONL workload (default: the bench prompts)."),
    category: Optional[str] = typer.Option("code", "--category", help="Only prompts of this category ('' for all)."),
    limit: Optional[int] = typer.Option(2, "--limit", help="Prompts per category."),
    max_tokens: int = typer.Option(128, "--max-tokens", "-n", min=1),
    sweep_budgets: bool = typer.Option(False, "--sweep", help="Also run under a range of budgets, from plain "
                                       "decoding's footprint up, each in a fresh process: speed-up against budget."),
    budgets: Optional[str] = typer.Option(None, "--budgets", help="Comma-separated budgets for --sweep "
                                          "(default: plain decoding's footprint x 1.0, 1.05, 1.1, 1.25, 1.5)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
    plot_path: Optional[Path] = typer.Option(None, "--plot", help="Plot memory over time (and the sweep) to a PNG."),
    ctx: int = CtxOpt,
    threads: Optional[int] = ThreadsOpt,
    max_draft: int = MaxDraftOpt,
    device: str = DeviceOpt,
    quiet: bool = typer.Option(False, "--quiet", hidden=True),
) -> None:
    """Run a workload with memory sampled over time; print predicted against measured memory.

    Example: edgespec profile qwen2.5-coder-1.5b --memory-budget 1.5GB --sweep --plot memory.png
    """
    from edgespec.bench.common import load_prompts
    from edgespec.bench.profile import plot, print_profile, print_sweep, run_profile, sweep
    from edgespec.bench.record import PROFILE, SWEEP, record
    from edgespec.memory.footprint import fmt_bytes, process_rss
    from edgespec.memory.planner import plain_footprint
    from edgespec.models.facts import ModelFacts

    rows = [p for p in load_prompts(prompts, limit) if not category or p["category"] == category]
    if not rows:
        fail(f"no prompts of category {category!r}")
    console = err if quiet else out
    r = run_profile(model, drafter, memory_budget, ctx, threads, max_draft, max_tokens, rows, device)
    result: dict = {"run": r}
    if not quiet:
        print_profile(r, console)
    if sweep_budgets:
        base = plain_footprint(ModelFacts.from_gguf(model_file(resolve(model))), ctx, process_rss()["rss"])
        out.print(f"plain decoding's footprint at context {ctx}: {fmt_bytes(base)} (f16 KV cache, weights read "
                  "once, micro-batch 64)", highlight=False)
        if budgets:
            levels: list = [b.strip() for b in budgets.split(",") if b.strip()]
        else:
            levels = [f"{int(base * f)}" for f in (1.0, 1.05, 1.1, 1.25, 1.5)]
        result["sweep"] = sweep(model, drafter, [None, *levels], ctx, threads, max_draft, max_tokens, prompts,
                                limit, err, category, device)
        print_sweep(result["sweep"], out, base)
    if json_path:  # a record for the docs (edgespec bench --markdown prints its table), without the
        # memory samples over time that a run keeps for --plot (a sweep's runs come from such records)
        if sweep_budgets:
            rec = record(result["sweep"], model, kind=SWEEP, plain_footprint=base)
        else:
            unsampled = {k: v for k, v in r.items() if k not in ("samples", "marks")}
            rec = record([{**unsampled, "device": device}], model, kind=PROFILE)
        json_path.write_text(json.dumps(rec, indent=2))
    if plot_path:
        plot(plot_path, r, result.get("sweep"))
        console.print(f"[dim]wrote {plot_path}[/]")
