"""`edgespec bench --backend fpga-sim`: what speculation would gain on an edge FPGA.

The model's numerics run here (llama.cpp), so the drafters' acceptance is
measured on real text; every call the engine makes is also priced by the board's
cycle model (runtimes/fpga_cost.py, TeLLMe v2's design on a KV260 by default),
and the controller plans its draft lengths from those board costs, not from
this CPU's. Tokens/s and energy are therefore simulated; acceptance is measured.
"""

from __future__ import annotations

from collections import defaultdict

from rich.console import Console
from rich.table import Table

from .bench import encode_prompt
from .runtimes.fpga_cost import BITNET_0_73B, KV260, TELLME_PUBLISHED, tellme_cost_model


def run_fpga_bench(model: str, rows: list[dict], drafters: list[str], max_tokens: int, ctx: int,
                   threads: int | None, max_draft: int, console: Console) -> list[dict]:
    from .api import EdgeSpec
    from .runtimes import open_backend
    from .runtimes.fpga_sim import BoardClock
    from .store import resolve

    cost = tellme_cost_model()
    path = resolve(model)
    methods = {}
    for d in ["none", *drafters]:
        clock = BoardClock(open_backend(path, n_ctx=ctx, threads=threads), cost)
        # the clock reports the board's time for every batch: the controller plans from it
        llm = EdgeSpec(clock, drafter=d, n_ctx=ctx, threads=threads, max_draft=max_draft)
        methods["plain" if d == "none" else d] = (llm, clock)
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0, 0])
    for i, row in enumerate(rows, 1):
        console.print(f"[dim]{i}/{len(rows)} {row['category']}[/]", highlight=False)
        for name, (llm, clock) in methods.items():  # interleaved prompt by prompt, as `bench` does
            llm.reset()
            ids = encode_prompt(row, llm)
            n_calls = len(clock.calls)
            toks = list(llm.engine.generate(ids, max_tokens))
            # the first call is the prefill: decode time is every later call, as the board priced it
            decode_s = sum(seconds for _, _, seconds in clock.calls[n_calls + 1 :])
            st = llm.last_stats
            for cat in (row["category"], "all"):
                t = totals[(cat, name)]
                t[0] += max(len(toks) - 1, 0)
                t[1] += decode_s
                t[2] += st.drafted
                t[3] += st.accepted
    out = []
    cats = [*dict.fromkeys(r["category"] for r in rows), "all"]
    order = {m: i for i, m in enumerate(methods)}
    for (cat, name), (n_tok, secs, drafted, accepted) in sorted(totals.items(),
                                                               key=lambda kv: (cats.index(kv[0][0]), order[kv[0][1]])):
        plain = totals[(cat, "plain")]
        tps = n_tok / secs if secs else 0.0
        plain_tps = plain[0] / plain[1] if plain[1] else 0.0
        out.append({"category": cat, "method": name, "board": KV260.name, "design": "tellme-v2",
                    "cost_shape": BITNET_0_73B.name, "simulated_tokens_per_s": round(tps, 2),
                    "simulated_speedup": round(tps / plain_tps, 3) if plain_tps else None,
                    "simulated_joules_per_token": round(KV260.power_w / tps, 4) if tps else None,
                    "acceptance": round(accepted / drafted, 3) if drafted else None, "drafted": drafted})
    for llm, _ in methods.values():
        llm.close()
    return out


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
