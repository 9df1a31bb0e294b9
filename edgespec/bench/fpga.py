"""`edgespec bench --backend fpga-sim`: what speculation would gain on an edge FPGA.

Every call is priced by the board's cycle model (runtimes/fpga/cost.py, TeLLMe v2's
design on a KV260) through simulated.py: tokens/s and energy are simulated, acceptance
is measured on the real model.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from edgespec.bench.record import fmt_cell
from edgespec.bench.simulated import ordered_rows, simulate
from edgespec.models.store import resolve
from edgespec.runtimes.fpga.cost import (BITNET_0_73B, KV260, TELLME, TELLME_PUBLISHED, tellme_cost_model,
                                         widest_cost_model)


def run_fpga_bench(model: str, rows: list[dict], drafters: list[str], max_tokens: int, ctx: int,
                   threads: int | None, max_draft: int, console: Console) -> list[dict]:
    names, totals = simulate(resolve(model), rows, drafters, max_tokens, ctx, threads, max_draft,
                             tellme_cost_model(), console)
    return [{"category": cat, "method": name, "board": KV260.name, "design": "tellme-v2",
             "cost_shape": BITNET_0_73B.name, "simulated_tokens_per_s": round(tps, 2),
             "simulated_speedup": round(ratio, 3) if ratio else None,
             "simulated_joules_per_token": round(KV260.power_w / tps, 4) if tps else None,
             "acceptance": round(acc, 3) if acc is not None else None, "drafted": drafted}
            for cat, name, tps, ratio, acc, drafted in ordered_rows(names, totals)]


def print_fpga_rows(rows: list[dict], console: Console) -> None:
    t = Table(title="simulated on KV260 (TeLLMe v2 design, BitNet b1.58 0.73B shape); acceptance measured")
    for col in ("category", "method", "sim tokens/s", "sim × plain", "sim J/token", "acceptance (measured)"):
        t.add_column(col)
    for r in rows:
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
        t.add_row(r["category"], r["method"], f"{r['simulated_tokens_per_s']:.2f}",
                  f"{r['simulated_speedup']:.2f}", f"{r['simulated_joules_per_token']:.3f}", acc)
    console.print(t)
    m = tellme_cost_model()
    p = TELLME_PUBLISHED
    console.print(f"cycle model against TeLLMe v2's published figures: decode {m.decode_tokens_per_s(128):.1f} tok/s "
                  f"(paper {p['decode_tokens_per_s']:g}), TTFT 64 tokens {m.prefill_seconds(64):.2f} s "
                  f"(paper {p['ttft_64_s']:g}), 128 tokens {m.prefill_seconds(128):.2f} s (paper {p['ttft_128_s']:g})",
                  highlight=False)
    one = m.eval_cost(1, 256).seconds
    curve = ", ".join(f"{k}: {m.eval_cost(k, 256).seconds / one:.2f}x" for k in (2, 4, 8, 16))
    console.print(f"board cost of verifying k tokens at context 256, against one token: {curve}", highlight=False)
    console.print(f"fabric the design takes on the {KV260.name} (lanes, table adders, attention DSPs, buffers; "
                  f"control and DMA not counted): {m.resources.summary()}", highlight=False)
    w, limit = widest_cost_model(KV260, TELLME, BITNET_0_73B)
    console.print(f"the widest TLMM the {KV260.name} holds: {w.design.lookups_per_cycle:,} lanes (against "
                  f"{m.design.lookups_per_cycle:,}), limited by {limit}: TTFT 128 tokens {w.prefill_seconds(128):.2f} s "
                  f"(against {m.prefill_seconds(128):.2f} s), decode {w.decode_tokens_per_s(128):.1f} tok/s "
                  f"(against {m.decode_tokens_per_s(128):.1f}; {w.eval_cost(1, 128).bound}-bound)", highlight=False)


def table(rows: list[dict]) -> list[str]:
    """`bench --backend fpga-sim`: speed and energy priced by the board model, acceptance measured."""
    out = ["| category | method | simulated tok/s | simulated x plain | simulated J/token | acceptance (measured) |",
           "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['category']} | {r['method']} | {r['simulated_tokens_per_s']:.2f} | "
                   f"{fmt_cell(r['simulated_speedup'])} | {fmt_cell(r['simulated_joules_per_token'], '.3f')} | "
                   f"{fmt_cell(r['acceptance'], '.0%')} |")
    return out
