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

from .bench import encode_prompt
from .errors import EdgespecError


def simulate(path: Path, rows: list[dict], drafters: list[str], max_tokens: int, ctx: int, threads: int | None,
             max_draft: int, cost, console: Console) -> tuple[list[str], dict[tuple[str, str], list[float]]]:
    """Run every method on every prompt, interleaved, on a clock that charges `cost`.

    Returns the method names ("plain" first) and, per (category, method) and for "all",
    [decoded tokens after the first, simulated decode seconds, drafted, accepted]."""
    from .api import EdgeSpec
    from .runtimes import open_backend
    from .runtimes.fpga_sim import BoardClock

    methods = {}
    for d in ["none", *drafters]:
        clock = BoardClock(open_backend(path, n_ctx=ctx, threads=threads), cost)
        # the clock reports the simulated time of every batch: the controller plans from it
        llm = EdgeSpec(clock, drafter=d, n_ctx=ctx, threads=threads, max_draft=max_draft)
        methods["plain" if d == "none" else d] = (llm, clock)
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
                   threads: int | None, max_draft: int, profile_names: list[str], console: Console) -> list[dict]:
    """`edgespec bench --device-profile NAME`: tokens/s projected for each profile's GPU
    from acceptance measured here. The memory planner first checks that the model and
    drafters fit the profile's memory (on shared memory, as system RAM)."""
    from .footprint import ModelFacts
    from .planner import BudgetError, make_plan
    from .runtimes import model_file
    from .runtimes.device_profiles import ModelShape, RooflineCost, profile
    from .store import resolve

    from .drafters import MODEL_FREE

    profiles = [profile(n) for n in profile_names]
    priced = [d for d in drafters if d not in MODEL_FREE]
    if priced:
        raise EdgespecError(f"device profiles price the target model's calls only; a model drafter ({priced[0]}) "
                            "would run here unpriced: project model-free drafters (lookup, ngram, recycle, auto)")
    path = resolve(model)
    shape = ModelShape.from_facts(ModelFacts.from_gguf(model_file(path)))
    out = []
    for p in profiles:
        fits = []
        for d in ["none", *drafters]:
            try:
                plan = make_plan(path, d, ctx, max_draft, p.memory_bytes)
                fits.append(plan.drafter == d)  # the planner swaps a drafter that does not fit for a smaller one
            except BudgetError as e:
                raise BudgetError(f"{model} does not fit {p.name}'s {p.memory_bytes / 2**30:.0f} GiB: {e}") from None
        usable = [d for d, ok in zip(drafters, fits[1:]) if ok]
        skipped = [d for d in drafters if d not in usable]
        if skipped:
            console.print(f"[yellow]{p.name}:[/] {', '.join(skipped)} does not fit beside the model; left out",
                          highlight=False)
        cost = RooflineCost(p, shape)
        console.print(f"[dim]projecting {p.name}…[/]", highlight=False)
        names, totals = simulate(path, rows, usable, max_tokens, ctx, threads, max_draft, cost, console)
        one = cost.eval_cost(1, 256).seconds
        curve = {k: round(cost.eval_cost(k, 256).seconds / one, 3) for k in (2, 4, 8, 16)}
        for cat, name, tps, ratio, acc, drafted in ordered_rows(names, totals):
            out.append({"device_profile": p.name, "category": cat, "method": name,
                        "projected_tokens_per_s": round(tps, 2), "projected_speedup": round(ratio, 3) if ratio else None,
                        "acceptance": round(acc, 3) if acc is not None else None, "drafted": drafted,
                        "verify_cost_curve": curve, "bound_at_16": cost.eval_cost(16, 256).bound})
    return out


def print_projection(rows: list[dict], console: Console) -> None:
    from rich.table import Table

    from .runtimes.device_profiles import BANDWIDTH_EFFICIENCY, COMPUTE_EFFICIENCY, LAYER_OVERHEAD_S, PROFILES

    for name in dict.fromkeys(r["device_profile"] for r in rows):
        p = PROFILES[name]
        t = Table("category", "method", "PROJECTED tok/s", "PROJECTED × plain", "acceptance (measured here)",
                  title=f"PROJECTION for {p.description} (roofline): not measured")
        mine = [r for r in rows if r["device_profile"] == name]
        for r in mine:
            t.add_row(r["category"], r["method"], f"{r['projected_tokens_per_s']:.1f}",
                      f"{r['projected_speedup']:.2f}" if r["projected_speedup"] else "-",
                      f"{r['acceptance']:.0%}" if r["acceptance"] is not None else "-")
        console.print(t)
        curve = ", ".join(f"{k}: {v:.2f}x" for k, v in mine[0]["verify_cost_curve"].items())
        console.print(f"  projected cost of verifying k tokens at context 256, against one: {curve} "
                      f"(16 tokens: {mine[0]['bound_at_16']}-bound)", highlight=False)
        console.print(f"  assumed: {p.source}; {BANDWIDTH_EFFICIENCY:.0%} of peak bandwidth, "
                      f"{COMPUTE_EFFICIENCY:.0%} of peak FP16, {LAYER_OVERHEAD_S * 1e3:.1f} ms per layer per call "
                      "(a roofline: an optimistic bound, not a prediction of any runtime)",
                      highlight=False, soft_wrap=True)
