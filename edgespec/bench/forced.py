"""Forced rows: a drafter verified at a fixed draft length every step, paying or not.

They are measurements, not what edgespec does: the controller would decline a draft that
does not pay, so an adaptive row never shows what a drafter it declines is worth. Forced at
k tokens (at most: a model drafter still stops where it is unsure), a row shows its
acceptance by position and its cost per step; from those and the batch-cost curve timed in
the same run, the speed-up the drafter gives at that length (`projected`: counted tokens
priced by the curve, so prompt-to-prompt timing noise stays out; the curve's own stays in).
Rows are named `forced<k>:<drafter>`, so no table can pass them off as a
drafter's own; each gains its `summary` (rows.annotate).
"""

from __future__ import annotations

from typing import Sequence

from rich.console import Console
from rich.table import Table

from edgespec.bench.common import Run, print_wide
from edgespec.errors import EdgespecError

PREFIX = "forced"


def label(drafter_label: str, k: int) -> str:
    return f"{PREFIX}{k}:{drafter_label}"


def parse_lengths(text: str | None) -> list[int]:
    """`--forced 1,2,4` as draft lengths; none when not given."""
    if not text:
        return []
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise EdgespecError(f"--forced takes draft lengths like 1,2,4: got {text!r}") from None
    if not ks or ks[0] < 1:
        raise EdgespecError(f"--forced takes draft lengths of at least 1: got {text!r}")
    return ks


def _interpolated(curve: dict[int, float], n: float) -> float:
    """Seconds of a batch of n tokens (n need not be whole: a mean over steps)."""
    sizes = sorted(curve)
    lo = max((s for s in sizes if s <= n), default=sizes[0])
    hi = min((s for s in sizes if s >= n), default=sizes[-1])
    if hi == lo:
        return curve[lo]
    return curve[lo] + (curve[hi] - curve[lo]) * (n - lo) / (hi - lo)


def summary(runs: Sequence[Run], curve: dict[int, float] | None) -> dict:
    """What a forced row's runs measured per step, and the speed-up over plain decoding they
    give at `curve` (seconds by batch size): tokens a step over the step's price (its
    verification batch at the mean draft length, plus the drafter model's time), in units of
    one token."""
    steps = sum(r.steps for r in runs)
    if not steps:
        return {}
    drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
    model_s = sum(r.drafter_model_s for r in runs)
    out = {"steps": steps, "drafted_per_step": round(drafted / steps, 3),
           "tokens_per_step": round((steps + accepted) / steps, 3),
           "drafter_ms_per_step": round(1000 * model_s / steps, 3),
           "drafter_ms_per_token": round(1000 * model_s / drafted, 3) if drafted else None}
    if curve and 1 in curve:
        price = _interpolated(curve, 1 + drafted / steps) + model_s / steps
        out["projected_x_plain"] = round((steps + accepted) / steps * curve[1] / price, 3)
    return out


COLUMNS = ("category", "row", "x plain", "projected", "accepted by position", "drafted/step", "tokens/step",
           "drafter ms/step", "drafter ms/drafted token")


def _cells(r: dict) -> list[str]:
    f = r["forced"]
    lo_hi = r.get("x_plain_interval")
    measured = f"{r['ratio_to_plain']:.2f}" + (f" ({lo_hi[0]:.2f}-{lo_hi[1]:.2f})" if lo_hi else "")
    return [r["category"], r["drafter"], measured,
            f"{f['projected_x_plain']:.2f}" if "projected_x_plain" in f else "-",
            "/".join("-" if a is None else f"{100 * a:.0f}%" for a in r["acceptance_by_position"][:4]) or "-",
            f"{f['drafted_per_step']:.2f}", f"{f['tokens_per_step']:.2f}", f"{f['drafter_ms_per_step']:.1f}",
            "-" if f["drafter_ms_per_token"] is None else f"{f['drafter_ms_per_token']:.1f}"]


def print_forced(rows: list[dict], console: Console) -> None:
    """Per forced row: acceptance by position, the drafter's cost, measured and projected speed-up."""
    forced = [r for r in rows if r.get("forced")]
    if not forced:
        return
    t = Table(*COLUMNS, title="forced drafting (measurements, not what auto does)")
    for r in forced:
        t.add_row(*_cells(r))
    print_wide(console, t, 140)


def markdown_lines(rows: list[dict]) -> list[str]:
    """The forced rows as the docs' table (without the `all` rows of a run of one category:
    they repeat it)."""
    forced = [r for r in rows if r.get("forced")]
    if len({r["category"] for r in forced}) == 2:
        forced = [r for r in forced if r["category"] != "all"]
    out = ["| " + " | ".join(COLUMNS) + " |", "|---|---|" + "---:|" * (len(COLUMNS) - 2)]
    return out + ["| " + " | ".join(_cells(r)) + " |" for r in forced]
