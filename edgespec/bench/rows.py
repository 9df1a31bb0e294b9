"""A bench's rows: one per method and category (then "all"), built from the runs as `Row`s,
annotated with what they are compared with, and kept (`Row.as_record`) as the dicts a bench
record holds; the tables print those dicts, from this run or from a record, to the console or
as the docs' markdown (record.markdown)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Mapping, NamedTuple, Sequence

from rich.console import Console
from rich.table import Table

from edgespec.bench import forced as forced_rows
from edgespec.bench.common import print_wide
from edgespec.bench.hybrid_compare import (INTERVAL, against_best_member, against_best_peer, against_plain,
                                           print_against_peers, print_hybrids)
from edgespec.bench.llama_server import NAME
from edgespec.bench.methods import ORACLE, PLAIN, REPLAY, Method, priced_method
from edgespec.bench.record import categories, fmt_cell
from edgespec.drafters import AUTO


class Totals(NamedTuple):
    """One method's runs in one category, summed."""

    tokens: int  # after each run's first, whose time is the prefill's
    seconds: float
    drafted: int
    accepted: int
    overhead_ms: float  # per token
    by_position: list  # [tried, accepted] per draft position
    steps: int
    drafter_step_ms: float | None
    by_key: dict  # kind -> [drafted, accepted]
    forced: int = 0  # tokens a grammar forced
    grammar_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def _runs_of(runs: dict, name: str, cat: str) -> list:
    """A method's runs in one category, or in all ("all")."""
    return [x for (n, c), lst in runs.items() for x in lst if n == name and (cat == "all" or c == cat)]


def totals(runs: dict, name: str, cat: str) -> Totals:
    rs = _runs_of(runs, name, cat)
    pos: list[list[int]] = []
    keys: dict[str, list[int]] = {}
    for r in rs:
        for i, (t, a) in enumerate(r.position):
            while len(pos) <= i:
                pos.append([0, 0])
            pos[i][0] += t
            pos[i][1] += a
        for k, (dr, ac) in r.by_key.items():
            keys.setdefault(k, [0, 0])
            keys[k][0] += dr
            keys[k][1] += ac
    dsteps = sum(r.drafter_steps for r in rs)
    return Totals(
        tokens=sum(len(r.tokens) - 1 for r in rs), seconds=sum(r.decode_s for r in rs),
        drafted=sum(r.drafted for r in rs), accepted=sum(r.accepted for r in rs),
        overhead_ms=sum(r.overhead_ms * len(r.tokens) for r in rs) / max(1, sum(len(r.tokens) for r in rs)),
        by_position=pos, steps=sum(r.steps for r in rs),
        drafter_step_ms=1000 * sum(r.draft_s for r in rs) / dsteps if dsteps else None, by_key=keys,
        forced=sum(r.forced for r in rs), grammar_s=sum(r.grammar_s for r in rs))


# kept in a record even when empty; every other field only when set
_ALWAYS = {"category", "tokens_per_s", "acceptance_rate", "ratio_to_plain", "overhead_ms_per_token", "tokens",
           "mean_accepted", "acceptance_by_position", "identical_to_plain", "drafter_step_ms", "by_drafter",
           "other_cores", "stores_at_start"}


@dataclass
class Row:
    method: Method
    category: str
    tokens_per_s: float
    acceptance_rate: float | None
    ratio_to_plain: float | None
    overhead_ms_per_token: float | None
    tokens: int
    mean_accepted: float | None = None
    acceptance_by_position: list = field(default_factory=list)
    identical_to_plain: str | None = None  # "same/runs" for greedy decoding
    drafter_step_ms: float | None = None
    by_drafter: dict = field(default_factory=dict)  # which kind of draft the accepted tokens came from
    forced_tokens: int | None = None  # under a grammar: tokens it forced,
    grammar_ms_per_verified_token: float | None = None  # and its time per verified token
    note: str | None = None  # a priced row's: what it is
    server_command: str | None = None
    x_plain_interval: list | None = None
    other_cores: float | None = None
    against_best_member: dict | None = None
    against_best_peer: dict | None = None
    x_best_peer: float | None = None
    batch_costs_ms: list | None = None
    batch_cost_timings: int | None = None
    forced: dict | None = None  # a forced row's summary (forced.summary)
    stores_at_start: dict | None = None
    batch_costs_kernels_off_ms: list | None = None

    def as_record(self) -> dict:
        out = {"drafter": self.method.name}
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if value is not None or f.name in _ALWAYS:
                out[f.name] = value
        if self.method.edgespec:
            out["runtime"] = self.method.runtime_label
        return out


def measured_row(method: Method, cat: str, t: Totals, base_tps: float, identical: dict) -> Row:
    """A timed method's row: its totals against `base_tps`, its plain row's tokens/s."""
    return Row(
        method, cat, round(t.tokens_per_s, 3), round(t.accepted / t.drafted, 4) if t.drafted else None,
        round(t.tokens_per_s / base_tps, 3) if base_tps else None,
        round(t.overhead_ms, 4) if method.edgespec else None, t.tokens,
        mean_accepted=round((t.steps + t.accepted) / t.steps, 3) if t.steps else None,
        acceptance_by_position=[round(a / n, 3) if n else None for n, a in t.by_position][:8],
        identical_to_plain="{}/{}".format(*identical[(method.name, cat)]) if (method.name, cat) in identical else None,
        drafter_step_ms=round(t.drafter_step_ms, 3) if t.drafter_step_ms is not None else None,
        by_drafter={k: {"drafted": dr, "accepted": ac} for k, (dr, ac) in sorted(t.by_key.items())},
        **_grammar_cells(t))


def _grammar_cells(t: Totals) -> dict:
    """Under a grammar: the tokens it forced, and its time per token verified (every batch's
    rows: one a step, the drafted and the forced ones)."""
    if not t.grammar_s:
        return {}
    verified = t.steps + t.drafted + t.forced
    return {"forced_tokens": t.forced, "grammar_ms_per_verified_token": round(1000 * t.grammar_s / verified, 4)}


def priced_row(name: str, cat: str, plain_tps: float, plain_time: float, seconds: float, tokens: int,
               acceptance: float | None, note: str) -> Row:
    """A row priced, not timed: plain's output replayed at the run's batch costs."""
    ratio = plain_time / seconds if seconds else None
    return Row(priced_method(name), cat, round(plain_tps * ratio, 3) if ratio else 0.0, acceptance,
               round(ratio, 3) if ratio else None, None, tokens, note=note)


def replay_row(drafter: str, cat: str, plain_tps: float, plain_time: float, replay_time: float, drafted: int,
               accepted: int, tokens: int) -> Row:
    return priced_row(REPLAY + drafter, cat, plain_tps, plain_time, replay_time, tokens,
                      round(accepted / drafted, 4) if drafted else None,
                      "plain's output replayed by the real engine and controller at the measured batch costs")


def oracle_row(cat: str, plain_tps: float, plain_time: float, oracle_time: float, tokens: int) -> Row:
    """What prompt lookup would reach with a controller that knows how many tokens
    each proposal gets accepted, on this run's own plain output and batch costs."""
    return priced_row(ORACLE, cat, plain_tps, plain_time, oracle_time, tokens, None,
                      "upper bound: plain output replayed with perfect knowledge of acceptance")


def build(methods: Mapping[str, Method], runs: dict, identical: dict, cats: list[str], oracle: dict,
          replayed: dict) -> list[Row]:
    """A row per method and category (then "all"), with the oracle's and each replay's."""
    rows = []
    for cat in cats + ["all"]:
        plain = totals(runs, PLAIN, cat)
        for m in methods.values():
            base = totals(runs, m.plain, cat) if m.plain not in (PLAIN, m.name) else plain
            rows.append(measured_row(m, cat, totals(runs, m.name, cat), base.tokens_per_s, identical))
        if cat in oracle:
            rows.append(oracle_row(cat, plain.tokens_per_s, *oracle[cat], plain.tokens))
        for d, by_cat in replayed.items():
            rows.append(replay_row(d, cat, plain.tokens_per_s, *by_cat[cat], plain.tokens))
    return rows


def annotate(rows: list[Row], runs: dict, methods: Mapping[str, Method], cats: list[str],
             other_cores: float | None, costs: Sequence[float] | None, curves: dict, timings: int,
             server_commands: dict[str, str]) -> None:
    """What a row is compared with beyond its plain: the best peer, the prompts' spread, the
    best member of a hybrid; the batch costs a replay was priced at, and each runtime's curve (the
    median of `timings`); how a peer ran."""
    def plain_of(name: str) -> str:
        return methods[name].plain

    compared = against_best_member(runs, cats)
    spread = against_plain(runs, cats, plain_of)
    mine = [m.name for m in methods.values() if m.drafting]
    server_types = [m.name for m in methods.values() if m.peer == NAME and not m.is_plain]
    peers = against_best_peer(runs, cats, plain_of, mine, server_types)
    for r in rows:
        name, cat = r.method.name, r.category
        r.other_cores = other_cores
        if cat == "all":
            r.server_command = server_commands.get(name)
        r.x_plain_interval = spread.get((name, cat))
        r.against_best_member = compared.get(name, {}).get(cat)
        if (name, cat) in peers:
            r.against_best_peer = peers[(name, cat)]
            r.x_best_peer = r.against_best_peer["ratio"]
        if r.method.run is None:  # priced: at these costs
            r.batch_costs_ms = [round(1000 * float(c), 3) for c in costs[1:]]  # batch sizes 1, 2, ...
        curve = curves.get(r.method.runtime) if r.method.edgespec and r.method.is_plain and cat == "all" else None
        if curve:
            r.batch_costs_ms = [round(1000 * curve[n], 3) for n in sorted(curve)]
            r.batch_cost_timings = timings
        if r.method.forced:
            r.forced = forced_rows.summary(_runs_of(runs, name, cat), curves.get(r.method.runtime))


def print_rows(rows: list[dict], console: Console) -> None:
    """A bench's rows (records, `Row.as_record`) as its tables."""
    peers = any("x_best_peer" in r for r in rows)
    t = Table("category", "method", "tok/s", "x plain", f"{INTERVAL:.0%} over prompts", *(["x best peer"] if peers else []),
              "accept", "by position",
              "overhead ms/tok", "same as plain", "drafter ms/step", "accepted from",
              title="edgespec bench (decode speed, prefill excluded; measured side by side in one run)")
    for r in rows:
        t.add_row(
            r["category"], r["drafter"], f"{r['tokens_per_s']:.2f}",
            f"{r['ratio_to_plain']:.2f}" if r["ratio_to_plain"] is not None else "-",
            "{:.2f}-{:.2f}".format(*r["x_plain_interval"]) if "x_plain_interval" in r else "-",
            *([f"{r['x_best_peer']:.2f}" if "x_best_peer" in r else "-"] if peers else []),
            f"{r['acceptance_rate']:.0%}" if r["acceptance_rate"] is not None else "-",
            "/".join("-" if a is None else f"{100 * a:.0f}" for a in r["acceptance_by_position"][:4]) or "-",
            f"{r['overhead_ms_per_token']:.3f}" if r["overhead_ms_per_token"] is not None else "-",
            r["identical_to_plain"] or "-",
            f"{r['drafter_step_ms']:.1f}" if r.get("drafter_step_ms") is not None else "-",
            " ".join(f"{k} {v['accepted']}" for k, v in r.get("by_drafter", {}).items() if v["accepted"]) or "-",
        )
    print_wide(console, t, 160)
    print_hybrids(rows, console)
    print_against_peers(rows, console)
    print_fastest(rows, console)
    print_grammar(rows, console)
    forced_rows.print_forced(rows, console)


def print_grammar(rows: list[dict], console: Console) -> None:
    """Under a grammar, one line per method: tokens forced, and the grammar's ms per verified token."""
    for r in rows:
        if r["category"] == "all" and "grammar_ms_per_verified_token" in r:
            console.print(f"grammar, {r['drafter']}: {r['forced_tokens']} tokens forced, "
                          f"{r['grammar_ms_per_verified_token']:.3f} ms per verified token (masks, forced "
                          "tokens, draft checks)", highlight=False)


def print_fastest(rows: list[dict], console: Console) -> None:
    """Where the run holds more than one of edgespec's runtimes or devices (ONNX exports, a
    GPU), which of them decodes each category fastest end to end, drafting included (forced rows
    aside): a representation with dear single steps but cheap batches can win where drafts are long."""
    ran = [r for r in rows if r.get("runtime") and "forced" not in r]
    if len({r["runtime"] for r in ran}) < 2:
        return
    for cat in dict.fromkeys(r["category"] for r in rows):
        best: dict[str, dict] = {}
        for r in ran:
            if r["category"] == cat and r["tokens_per_s"] > best.get(r["runtime"], {}).get("tokens_per_s", 0):
                best[r["runtime"]] = r
        ranked = sorted(best.values(), key=lambda r: -r["tokens_per_s"])
        console.print(f"{cat}: {ranked[0]['drafter']} decodes fastest end to end ({ranked[0]['tokens_per_s']:.2f} tok/s; "
                      "the best of each other runtime: " + ", ".join(f"{r['drafter']} {r['tokens_per_s']:.2f}"
                                                                  for r in ranked[1:]) + ")", highlight=False)


def markdown_full(rows: list[dict]) -> list[str]:
    """Every row, x plain with its interval over the run's prompts where the record has one;
    where rows ran on another device (`gpu:`), its x plain is against that device's plain,
    and each output is compared with that plain's ("same as plain"); a model drafter's row
    gives the time of one of its draft tokens ("drafter ms/step"); under a grammar, edgespec's rows
    give the tokens it forced and its time per verified token."""
    peers = any("x_best_peer" in r for r in rows)
    devices = any(r["drafter"].startswith("gpu:") for r in rows)
    models = any(r.get("drafter_step_ms") is not None for r in rows)
    grammar = any("grammar_ms_per_verified_token" in r for r in rows)
    out = ["| category | method | tok/s | x plain |" + (" x best peer |" if peers else "") + " accepted |"
           + (" same as plain |" if devices else "") + (" drafter ms/step |" if models else "")
           + (" forced tokens | grammar ms/verified token |" if grammar else ""),
           "|---|---|---|---|" + ("---|" if peers else "") + "---|" + ("---|" if devices else "")
           + ("---|" if models else "") + ("---|---|" if grammar else "")]
    for r in rows:
        spread = " ({:.2f}-{:.2f})".format(*r["x_plain_interval"]) if "x_plain_interval" in r else ""
        cells = [r["category"], r["drafter"], fmt_cell(r.get("tokens_per_s")),
                 fmt_cell(r.get("ratio_to_plain")) + spread]
        cells += [fmt_cell(r.get("x_best_peer"))] if peers else []
        cells += [fmt_cell(r.get("acceptance_rate"), ".0%")]
        cells += [r.get("identical_to_plain") or "-"] if devices else []
        cells += [fmt_cell(r.get("drafter_step_ms"), ".1f")] if models else []
        cells += [str(r.get("forced_tokens", "-")), fmt_cell(r.get("grammar_ms_per_verified_token"), ".3f")] \
            if grammar else []
        out.append("| " + " | ".join(cells) + " |")
    return out


def markdown_headline(rows: list[dict]) -> list[str]:
    """Plain's speed, `auto`'s over it, the best llama-server type's over llama-server's plain,
    and `auto`'s against that type's, each ratio with its paired interval over the prompts."""
    out = ["| | " + " | ".join(categories(rows)) + " |", "|---|" + "---|" * len(categories(rows))]
    by = {(r["category"], r["drafter"]): r for r in rows}
    best = {c: max((r for r in rows if r["category"] == c and r["drafter"].startswith("llama-server:")),
                   key=lambda r: r["ratio_to_plain"] or 0, default=None) for c in categories(rows)}

    def with_interval(ratio: float | None, interval: list | None) -> str:
        return fmt_cell(ratio) + (" ({:.2f}-{:.2f})".format(*interval) if interval else "")

    def auto_vs_peer(c: str) -> str:
        compared = by[(c, AUTO)].get("against_best_peer")
        return with_interval(compared["ratio"], compared["interval"]) if compared else "-"

    lines = [
        ("plain llama.cpp, tok/s", lambda c: fmt_cell(by[(c, "plain")]["tokens_per_s"])),
        ("edgespec `auto`, x plain",
         lambda c: with_interval(by[(c, AUTO)]["ratio_to_plain"], by[(c, AUTO)].get("x_plain_interval"))),
        ("best llama-server `--spec-type`, x its plain",
         lambda c: f"{best[c]['drafter'].split(':', 1)[1]} "
                   f"{with_interval(best[c]['ratio_to_plain'], best[c].get('x_plain_interval'))}" if best[c] else "-"),
        ("edgespec `auto` against it", auto_vs_peer),
    ]
    for label, cell in lines:
        out.append(f"| {label} | " + " | ".join(cell(c) for c in categories(rows)) + " |")
    return out


CURVE_SIZES = (2, 3, 4, 5, 8, 12, 16)


def markdown_curves(rows: list[dict]) -> list[str]:
    """Each runtime's batch-cost curve: one token in ms, and a batch of n tokens in units of
    one token (what a draft of n - 1 tokens costs to verify), and how the bench timed it."""
    out = ["| runtime | 1 token, ms | " + " | ".join(f"{n} tokens" for n in CURVE_SIZES) + " |",
           "|---|---:|" + "---:|" * len(CURVE_SIZES)]
    timings = set()
    for r in rows:
        if r["category"] == "all" and r["drafter"].endswith("plain") and r.get("batch_costs_ms"):
            ms = r["batch_costs_ms"]  # batch sizes 1, 2, ...
            runtime = "llama.cpp" if r["drafter"] == "plain" else r["drafter"].split(":")[0]
            out.append(f"| {runtime} | {ms[0]:.1f} | " + " | ".join(f"{ms[n - 1] / ms[0]:.2f}" if n <= len(ms) else "-"
                                                              for n in CURVE_SIZES) + " |")
            timings.add(r.get("batch_cost_timings"))
    return out + ["", _how_timed(timings)]


def _how_timed(timings: set) -> str:
    """A record without a count predates timing during the run: it timed its curves once, after the runs."""
    n = max((t for t in timings if t), default=1)
    return f"Each size the median of {n} timings, one after each category's prompts." if n > 1 else \
        "Timed once, after the runs."
