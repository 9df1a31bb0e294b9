"""Speculation priced on hardware that is not here: an FPGA's cycle model, or a GPU's
roofline (device profiles).

The model's numerics run on this machine (llama.cpp), so the drafters' acceptance is
measured on real text. Every call the engine makes is also priced by the cost model,
and the controller plans its draft lengths from those costs, not from this CPU's: the
draft lengths are the ones the simulated device would choose. Tokens/s are therefore
simulated (projected); acceptance is measured.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rich.console import Console

from edgespec.api import EdgeSpec
from edgespec.bench.common import encode_prompt, print_wide
from edgespec.bench.record import fmt_cell
from edgespec.drafters import PLAIN as NO_DRAFTER, DrafterSpec, model_free
from edgespec.errors import EdgespecError
from edgespec.memory.footprint import fmt_bytes, parse_bytes, process_rss
from edgespec.memory.plan import BudgetError
from edgespec.memory.planner import plan_for_profile
from edgespec.models.facts import ModelFacts
from edgespec.models.store import model_file, resolve
from edgespec.runtimes import open_backend
from edgespec.runtimes.fpga.sim import BoardClock
from edgespec.runtimes.gpu.profiles import (BANDWIDTH_EFFICIENCY, COMPUTE_EFFICIENCY, LAYER_OVERHEAD_S, PROFILES,
                                            ModelShape, RooflineCost, profile)


def simulate(path: Path, rows: list[dict], drafters: list[str], max_tokens: int, ctx: int, threads: int | None,
             max_draft: int, cost, console: Console, limits: dict[str, tuple[int, int]] | None = None
             ) -> tuple[list[str], dict[tuple[str, str], list[float]]]:
    """Run every method on every prompt, interleaved, on a clock that charges `cost`.
    `limits` maps a drafter ("none" for plain) to the (context, max draft) its plan allows.

    Returns the method names ("plain" first) and, per (category, method) and for "all",
    [decoded tokens after the first, simulated decode seconds, drafted, accepted]."""
    methods = {}
    for d in [NO_DRAFTER, *drafters]:
        n_ctx, k = (limits or {}).get(d, (ctx, max_draft))
        clock = BoardClock(open_backend(path, n_ctx=n_ctx, threads=threads), cost)
        # the clock reports the simulated time of every batch: the controller plans from it
        llm = EdgeSpec(clock, drafter=d, n_ctx=n_ctx, threads=threads, max_draft=k, clock=clock)
        methods["plain" if d == NO_DRAFTER else d] = (llm, clock)
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0, 0])
    try:
        for i, row in enumerate(rows, 1):
            console.print(f"[dim]{i}/{len(rows)} {row['category']}[/]", highlight=False)
            for name, (llm, clock) in methods.items():  # interleaved prompt by prompt, as `bench` does
                llm.reset()
                ids = encode_prompt(row, llm)
                n_calls = len(clock.calls)
                toks = list(llm.engine.generate(ids, max_tokens))
                # the first call is the prefill: decode time is every later call, as priced
                decode_s = sum(seconds for _, _, seconds in clock.calls[n_calls + 1 :])
                st = llm.last_stats
                for cat in (row["category"], "all"):
                    t = totals[(cat, name)]
                    t[0] += max(len(toks) - 1, 0)
                    t[1] += decode_s
                    t[2] += st.drafted
                    t[3] += st.accepted
    finally:
        for llm, _ in methods.values():
            llm.close()
    return list(methods), totals


def ordered_rows(names: list[str], totals: dict[tuple[str, str], list[float]]):
    """(category, method, tokens/s, × plain, acceptance, drafted) in category then method order."""
    cats = list(dict.fromkeys(c for c, _ in totals))
    cats = [c for c in cats if c != "all"] + ["all"]
    for cat in cats:
        plain = totals[(cat, "plain")]
        plain_tps = plain[0] / plain[1] if plain[1] else 0.0
        for name in names:
            n_tok, secs, drafted, accepted = totals[(cat, name)]
            tps = n_tok / secs if secs else 0.0
            yield (cat, name, tps, tps / plain_tps if plain_tps else None,
                   accepted / drafted if drafted else None, drafted)


def run_projection(model: str, rows: list[dict], drafters: list[str], max_tokens: int, ctx: int,
                   threads: int | None, max_draft: int, profile_names: list[str], console: Console,
                   budget: str | None = None) -> list[dict]:
    """`edgespec bench --device-profile NAME`: tokens/s projected for each profile's GPU
    from acceptance measured here. Each method runs as the memory planner plans it for the
    profile (planner.plan_for_profile: layers offloaded, context and draft length within
    `budget`, by default the memory an app gets there); a drafter that does not fit is
    left out."""

    profiles = [profile(n) for n in profile_names]
    priced = [d for d in drafters if DrafterSpec.parse(d).uses_model]
    if priced:
        raise EdgespecError(f"device profiles price the target model's calls only; a model drafter ({priced[0]}) "
                            f"would run here unpriced: project model-free drafters ({', '.join(model_free()[1:])})")
    try:
        limit = parse_bytes(budget) if budget else None
    except ValueError as e:
        raise BudgetError(str(e)) from None
    path = resolve(model)
    facts = ModelFacts.from_gguf(model_file(path))
    shape = ModelShape.from_facts(facts)
    baseline = process_rss()["rss"]  # before any profile's run loads the model
    out = []
    for p in profiles:
        # a BudgetError names the model, the device and the minimum
        plans = {d: plan_for_profile(facts, p, limit, d, None, ctx, max_draft, baseline) for d in [NO_DRAFTER, *drafters]}
        # the planner swaps a drafter that does not fit for a smaller one
        usable = [d for d in drafters if plans[d].drafter == d]
        skipped = [d for d in drafters if d not in usable]
        if skipped:
            console.print(f"[yellow]{p.name}:[/] {', '.join(skipped)} does not fit beside the model; left out",
                          highlight=False)
        for d in [NO_DRAFTER, *usable]:
            console.print(f"[dim]{p.name} plan, {d}: {plans[d].summary()}[/]", highlight=False, soft_wrap=True)
        partial = [d for d in [NO_DRAFTER, *usable] if plans[d].n_gpu_layers <= facts.n_layer]
        if partial:
            console.print(f"[yellow]{p.name}:[/] only {plans[partial[0]].n_gpu_layers} of {facts.n_layer + 1} layers "
                          "fit on its GPU; the projection still prices every layer there, so it is optimistic",
                          highlight=False)
        cost = RooflineCost(p, shape)
        console.print(f"[dim]projecting {p.name}…[/]", highlight=False)
        limits = {d: (plans[d].n_ctx, plans[d].max_draft) for d in [NO_DRAFTER, *usable]}
        names, totals = simulate(path, rows, usable, max_tokens, ctx, threads, max_draft, cost, console, limits)
        one = cost.eval_cost(1, 256).seconds
        curve = {k: round(cost.eval_cost(k, 256).seconds / one, 3) for k in (2, 4, 8, 16)}
        for cat, name, tps, ratio, acc, drafted in ordered_rows(names, totals):
            pl = plans[NO_DRAFTER if name == "plain" else name]
            out.append({"device_profile": p.name, "category": cat, "method": name,
                        "projected_tokens_per_s": round(tps, 2), "projected_speedup": round(ratio, 3) if ratio else None,
                        "acceptance": round(acc, 3) if acc is not None else None, "drafted": drafted,
                        "verify_cost_curve": curve, "bound_at_16": cost.eval_cost(16, 256).bound,
                        "plan": pl.to_dict()})
    return out


def print_projection(rows: list[dict], console: Console) -> None:
    from rich.table import Table

    for name in dict.fromkeys(r["device_profile"] for r in rows):
        p = PROFILES[name]
        t = Table("category", "method", "PROJECTED tok/s", "PROJECTED × plain", "acceptance (measured here)",
                  "planned draft ≤", "PREDICTED memory", title=f"PROJECTION for {p.description} (roofline): not measured")
        mine = [r for r in rows if r["device_profile"] == name]
        for r in mine:
            t.add_row(r["category"], r["method"], f"{r['projected_tokens_per_s']:.1f}",
                      f"{r['projected_speedup']:.2f}" if r["projected_speedup"] else "-",
                      f"{r['acceptance']:.0%}" if r["acceptance"] is not None else "-",
                      str(r["plan"]["max_draft"] or "-"), fmt_bytes(r["plan"]["predicted"]["total"]))
        print_wide(console, t, 140)
        plan = mine[0]["plan"]
        console.print(f"  planned for {fmt_bytes(plan['budget'])} of its memory: {plan['n_gpu_layers']} layers on its GPU, "
                      f"context {plan['n_ctx']}; {plan['notes'][0]}", highlight=False, soft_wrap=True)
        curve = ", ".join(f"{k}: {v:.2f}x" for k, v in mine[0]["verify_cost_curve"].items())
        console.print(f"  projected cost of verifying k tokens at context 256, against one: {curve} "
                      f"(16 tokens: {mine[0]['bound_at_16']}-bound)", highlight=False)
        console.print(f"  assumed: {p.source}; {BANDWIDTH_EFFICIENCY:.0%} of peak bandwidth, "
                      f"{COMPUTE_EFFICIENCY:.0%} of peak FP16, {LAYER_OVERHEAD_S * 1e3:.1f} ms per layer per call "
                      "(a roofline: an optimistic bound, not a prediction of any runtime)",
                      highlight=False, soft_wrap=True)


def table(rows: list[dict]) -> list[str]:
    """`bench --device-profile`: speed PROJECTED by each profile's roofline, acceptance measured."""
    out = ["| device profile | category | method | PROJECTED tok/s | PROJECTED x plain | acceptance (measured) |",
           "|---|---|---|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['device_profile']} | {r['category']} | {r['method']} | {r['projected_tokens_per_s']:.1f} | "
                   f"{fmt_cell(r['projected_speedup'])} | {fmt_cell(r['acceptance'], '.0%')} |")
    return out
