"""A hybrid drafter against the best of its members, every method against plain, and
every edgespec method against the best peer, from one bench run, each ratio with an
interval over the run's prompts.

`auto` mixes the model-free drafters step by step, `auto+MODEL` adds a model drafter;
either should be at least as fast as the best single drafter it mixes. Two prompts
of one run differ by more than that comparison is about, so one aggregate ratio
cannot show it: here each category's ratio comes with an interval, resampling its
prompts (the bench ran every method on the same prompts, interleaved, so the
comparison is paired prompt by prompt). The best member is picked on the whole
sample and kept fixed while resampling: that favours the member, not the hybrid.
A method's "x plain" gets the same interval, and so does its speed-up against the best
peer's (llama-server's best speculation type, over llama-server's own plain). That peer is
picked per category on the whole sample, the best of several noisy ratios: where no type
drafts much (open chat) the pick is the one whose timing happened to run fast, so the
interval is what says whether a method is behind it.

The interval is this run's prompts' spread only. Each method's controller learns
from one prompt to the next, and a text that parts from plain's at a near-tie
copies differently from there, and the machine's speed drifts, so a second run
of the same command moves the ratio as well (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
from rich.console import Console
from rich.table import Table

from edgespec.bench.common import print_wide
from edgespec.bench.llama_server import NAME
from edgespec.drafters import DrafterSpec

RESAMPLES = 4000
INTERVAL = 0.9


def members(hybrid: str) -> list[str]:
    """The single drafters a hybrid mixes (its name in the bench: `auto` or `auto+LABEL`)."""
    return DrafterSpec.parse(hybrid).members


def _speeds(runs: Sequence) -> np.ndarray:
    """[tokens, seconds] per prompt, decoding only (the first token's time is the prefill's)."""
    return np.array([[max(len(r.tokens) - 1, 0), r.decode_s] for r in runs], dtype=float).reshape(-1, 2)


def _tps(s: np.ndarray) -> np.ndarray:
    """Tokens/s over the prompts of the second-to-last axis."""
    return s[..., 0].sum(-1) / s[..., 1].sum(-1)


def against_best_member(runs: Mapping[tuple[str, str], Sequence], categories: Sequence[str],
                        seed: int = 0) -> dict[str, dict[str, dict]]:
    """For every hybrid that ran beside at least one of its members: per category (and
    "all"), the member with the most tokens/s, the hybrid's speed over that member's,
    and a paired bootstrap interval of that ratio over the category's prompts."""
    names = dict.fromkeys(n for n, _ in runs)
    out: dict[str, dict[str, dict]] = {}
    rng = np.random.default_rng(seed)
    for hybrid in names:
        ran = [m for m in members(hybrid) if m in names]
        if not ran:
            continue
        for cat in [*categories, "all"]:
            per = {n: _per_prompt(runs, n, categories, cat) for n in [hybrid, *ran]}
            if any(len(s) != len(per[hybrid]) or s[:, 1].sum() <= 0 for s in per.values()):
                continue  # not run on the same prompts, or nothing decoded
            best = max(ran, key=lambda m: float(_tps(per[m])))
            ratio, interval = paired_ratio(per[hybrid], per[best], rng)
            out.setdefault(hybrid, {})[cat] = {"best_member": best, "ratio": ratio, "interval": interval,
                                               "prompts": len(per[hybrid])}
    return out


def against_plain(runs: Mapping[tuple[str, str], Sequence], categories: Sequence[str], plain_of: Callable[[str], str],
                  seed: int = 0) -> dict[tuple[str, str], list[float]]:
    """(method, category) -> a paired bootstrap interval of the method's speed over its plain
    run's (`plain_of`), over the category's prompts: how far this run's prompts alone move
    the "x plain" a row reports."""
    names = dict.fromkeys(n for n, _ in runs)
    out: dict[tuple[str, str], list[float]] = {}
    rng = np.random.default_rng(seed)
    for name in names:
        ref = plain_of(name)
        if ref == name or ref not in names:
            continue
        for cat in [*categories, "all"]:
            a, b = _per_prompt(runs, name, categories, cat), _per_prompt(runs, ref, categories, cat)
            if len(a) == len(b) and len(a) > 1 and a[:, 1].sum() > 0 and b[:, 1].sum() > 0:
                out[(name, cat)] = paired_ratio(a, b, rng)[1]
    return out


def _per_prompt(runs: Mapping[tuple[str, str], Sequence], name: str, categories: Sequence[str], cat: str) -> np.ndarray:
    cats = categories if cat == "all" else [cat]
    return np.concatenate([_speeds(runs.get((name, c), [])) for c in cats])


def against_best_peer(runs: Mapping[tuple[str, str], Sequence], categories: Sequence[str],
                      plain_of: Callable[[str], str], mine: Sequence[str], peers: Sequence[str],
                      seed: int = 0) -> dict[tuple[str, str], dict]:
    """(method, category) -> the peer type with the best speed-up over its plain (each of
    `peers` against `plain_of` it), the method's speed-up over that one's, and a paired
    bootstrap interval of that ratio over the category's prompts; for each of `mine`."""
    names = dict.fromkeys(n for n, _ in runs)
    out: dict[tuple[str, str], dict] = {}
    rng = np.random.default_rng(seed)
    for cat in [*categories, "all"]:
        per = {n: _per_prompt(runs, n, categories, cat) for n in names}
        usable = {n for n, s in per.items() if len(s) and s[:, 1].sum() > 0}
        ran = [p for p in peers if {p, plain_of(p)} <= usable]
        if not ran:
            continue
        best = max(ran, key=lambda p: float(_tps(per[p]) / _tps(per[plain_of(p)])))
        for name in mine:
            rows = [per[n] for n in (name, plain_of(name), best, plain_of(best)) if n in usable]
            if len(rows) == 4 and len({len(r) for r in rows}) == 1:
                ratio, interval = _paired(rows, lambda a, a0, b, b0: a / a0 / (b / b0), rng)
                out[(name, cat)] = {"best_peer": best, "ratio": ratio, "interval": interval, "prompts": len(rows[0])}
    return out


def paired_ratio(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[float, list[float]]:
    """a's tokens/s over b's on the same prompts ([tokens, seconds] rows, paired), and the
    INTERVAL of that ratio when the prompts are resampled, each prompt's pair kept together."""
    return _paired([a, b], np.divide, rng)


def rounds_ratio(times: Sequence[float], base: Sequence[float], seed: int = 0) -> tuple[float, list[float]]:
    """The mean of `times` over the mean of `base`, timed in the same rounds, and the INTERVAL of
    that ratio when the rounds are resampled, each round's pair kept together."""
    t, b = np.asarray(times, dtype=float), np.asarray(base, dtype=float)
    pick = np.random.default_rng(seed).integers(0, len(t), size=(RESAMPLES, len(t)))
    lo, hi = np.quantile(t[pick].mean(1) / b[pick].mean(1), [(1 - INTERVAL) / 2, (1 + INTERVAL) / 2])
    return round(float(t.mean() / b.mean()), 3), [round(float(lo), 3), round(float(hi), 3)]


def _paired(rows: Sequence[np.ndarray], f: Callable[..., np.ndarray],
            rng: np.random.Generator) -> tuple[float, list[float]]:
    """f of the rows' tokens/s (their prompts paired), and its INTERVAL when the prompts are
    resampled, each prompt's rows kept together."""
    pick = rng.integers(0, len(rows[0]), size=(RESAMPLES, len(rows[0])))
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample of one-token answers only
        spread = f(*(_tps(r[pick]) for r in rows))
    lo, hi = np.nanquantile(spread[np.isfinite(spread)], [(1 - INTERVAL) / 2, (1 + INTERVAL) / 2])
    return round(float(f(*(_tps(r) for r in rows))), 3), [round(float(lo), 3), round(float(hi), 3)]


def verdict(c: dict) -> str:
    """What one comparison shows, in words: a ratio measured to a precision says no more.
    One prompt has no spread to resample, so it shows nothing either way."""
    if c["prompts"] < 2:
        return "one prompt: no interval"
    lo, hi = c["interval"]
    if lo >= 1.0:
        return "faster in this run"
    if hi < 1.0:
        return "slower in this run"
    return "no difference measured"


def print_against_peers(rows: list[dict], console: Console) -> None:
    """Each edgespec method's speed-up against the best llama-server type's, with the
    precision this run allows (against_best_peer)."""
    compared = [r for r in rows if "against_best_peer" in r]
    if not compared:
        return
    t = Table("category", "method", "best type", "its x plain", "x best peer", f"{INTERVAL:.0%} interval", "prompts",
              "measured", title="speed-up against the best llama-server --spec-type's, each over its own plain "
              "(paired by prompt, resampled)")
    peer_ratio = {(r["drafter"], r["category"]): r["ratio_to_plain"] for r in rows}
    for r in compared:
        c = r["against_best_peer"]
        t.add_row(r["category"], r["drafter"], c["best_peer"].removeprefix(NAME + ":"),
                  f"{peer_ratio[(c['best_peer'], r['category'])]:.3f}", *_measured_cells(c))
    print_wide(console, t, 120)


def print_hybrids(rows: list[dict], console: Console) -> None:
    """Each hybrid against the best single drafter it mixes, with the precision this run allows."""
    compared = [r for r in rows if "against_best_member" in r]
    if not compared:
        return
    t = Table("category", "hybrid", "best member", "x best member", f"{INTERVAL:.0%} interval", "prompts", "measured",
              title="hybrids against the best single drafter they mix (paired by prompt, resampled)")
    for r in compared:
        c = r["against_best_member"]
        t.add_row(r["category"], r["drafter"], c["best_member"], *_measured_cells(c))
    print_wide(console, t, 120)


def _measured_cells(c: dict) -> list[str]:
    """A paired comparison's ratio, its interval, its prompts and what it shows."""
    return [f"{c['ratio']:.3f}", "{:.3f}-{:.3f}".format(*c["interval"]), str(c["prompts"]), verdict(c)]
