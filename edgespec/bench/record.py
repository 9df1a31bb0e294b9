"""A bench run as a record: its rows with the machine and command that produced them,
and the markdown tables the docs show, generated from the record alone.

`edgespec bench --json FILE` writes the record; `edgespec bench --markdown FILE`
prints its tables. A record another module makes (`KINDS`) is rendered by that module.
The docs keep each table between markers naming its record (`<!-- bench
docs/bench/NAME.json -->` ... `<!-- end bench -->`), and a test regenerates every one of
them byte for byte, so a table cannot drift from its data.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import shlex
import sys
import time
from pathlib import Path

import psutil

from edgespec.drafters import AUTO

SIMD = ("sse3", "ssse3", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
        "avx512_bf16", "amx_int8", "neon", "asimd", "sve")
START = re.compile(r"<!-- bench (\S+?)(?: (headline|curves|forced))? -->\n")
END = "<!-- end bench -->"


def machine() -> dict:
    """What a reader needs to compare this machine with theirs: CPU, cores, SIMD, llama.cpp build."""
    cpu = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            cpu.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(cpu.get("flags", cpu.get("Features", "")).split())
    return {
        "cpu": cpu.get("model name") or platform.processor() or platform.machine(),
        "cpu_family": cpu.get("cpu family"), "cpu_model": cpu.get("model"),
        "physical_cores": psutil.cpu_count(logical=False), "logical_cores": psutil.cpu_count(),
        "simd": [f for f in SIMD if f in flags],
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "llama_cpp": _llama_cpp_build(),
    }


def _llama_cpp_build() -> str:
    try:
        import llama_cpp

        info = llama_cpp.llama_print_system_info().decode().strip(" |")
        return f"llama-cpp-python {llama_cpp.__version__}: {info}"
    except Exception:  # no llama.cpp here: the record says so rather than fail the bench
        return "not installed"


def record(rows: list[dict], model: str, program: str = "edgespec", **fields) -> dict:
    """`program`: how this process was started (`edgespec`, `python3 -m MODULE`), before its
    arguments; `fields`: a record's kind and what its table needs beside the rows."""
    return {"date": time.strftime("%Y-%m-%d"), "command": f"{program} {shlex.join(sys.argv[1:])}",
            "model": model, "machine": machine(), "rows": rows, **fields}


def reproducing(command: str) -> str:
    """The command without `--json FILE`: where a run was written is not how it was made."""
    words = shlex.split(command)
    kept = [w for i, w in enumerate(words)
            if not (w == "--json" or w.startswith("--json=") or (i and words[i - 1] == "--json"))]
    return shlex.join(kept)


def rows_of(data: dict | list) -> list[dict]:
    """The rows of a record (or of a bare list of rows)."""
    return data["rows"] if isinstance(data, dict) else data


def markdown(rec: dict, view: str = "") -> str:
    """The record's table: every row; or (`headline`) plain, edgespec's default and the best
    llama-server type per category; or (`curves`) each runtime's batch costs; or (`forced`) the
    forced rows' acceptance, cost and projected speed-up (forced.py). A record of
    another kind (`kind`: export validation, memory sweep, footprints, server) has its own
    table, and a simulated FPGA's or a projected device's rows are labelled as such."""
    m = rec["machine"]
    cores = f"{m['physical_cores']} cores" if m.get("physical_cores") else f"{m['logical_cores']} logical cores"
    lines = [f"{rec['model']} on {m['cpu']} ({cores}, {', '.join(m['simd']).upper() or 'no SIMD flags'}), "
             f"{rec['date']}: `{reproducing(rec['command'])}`", ""]
    if rec.get("kind") in KINDS:
        lines += kind_table(rec)
    else:
        lines += _bench_table(rec["rows"], view)
    return "\n".join(lines) + "\n"


# Each kind of record (its `kind`), by the module that makes it; that module's `table(rec)`, or
# the function named, renders its table (imported when a record of the kind is rendered).
EXPORTS, SWEEP, SERVER, FOOTPRINTS = "export validation", "memory sweep", "server", "footprints"
ABLATIONS, BATCH_CURVES, OTHER_PROGRAMS = "ablations", "batch curves", "other programs"
ONE_TOKEN, PROFILE, MATMUL_NBITS = "one token", "profile", "matmul nbits"
KINDS = {EXPORTS: "exports", SWEEP: "profile:sweep_table", SERVER: "server", FOOTPRINTS: "footprints",
         ABLATIONS: "ablations", BATCH_CURVES: "curves", OTHER_PROGRAMS: "other_programs", ONE_TOKEN: "one_token",
         PROFILE: "profile:profile_table", MATMUL_NBITS: "matmul_nbits"}


def kind_table(rec: dict) -> list[str]:
    """The table of a record of one of KINDS, by the module that made it."""
    module, _, function = KINDS[rec["kind"]].partition(":")
    return getattr(importlib.import_module(f"edgespec.bench.{module}"), function or "table")(rec)


def _bench_table(rows: list[dict], view: str) -> list[str]:
    """An `edgespec bench` record's table in the view asked for; rows simulated on an FPGA or
    projected for a device by the module that makes them."""
    from edgespec.bench import forced, fpga, simulated

    full = fpga.table if "simulated_tokens_per_s" in rows[0] else \
        simulated.table if "device_profile" in rows[0] else _full
    return {"headline": _headline, "curves": _curves, "forced": forced.markdown_lines}.get(view, full)(rows)


def emit(rec: dict, path: Path | None) -> int:
    """A module's record: its table printed, and the record written to `path` if one is given."""
    print("\n".join(kind_table(rec)))
    if path:
        path.write_text(json.dumps(rec, indent=2) + "\n")
    return 0


def fmt_cell(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _full(rows: list[dict]) -> list[str]:
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


def _headline(rows: list[dict]) -> list[str]:
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


def _curves(rows: list[dict]) -> list[str]:
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


def categories(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["category"] for r in rows))


def regenerate(text: str, root: Path) -> str:
    """`text` (a docs page) with every bench table regenerated from the record it names."""
    out, pos = [], 0
    for m in START.finditer(text):
        end = text.index(END, m.end())
        rec = json.loads((root / m.group(1)).read_text())
        out += [text[pos:m.end()], markdown(rec, m.group(2) or "")]
        pos = end
    return "".join(out) + text[pos:]


def main(pages: list[str]) -> int:
    """python -m edgespec.bench.record PAGE.md ...: rewrite their tables in place."""
    if not pages or any(p.startswith("-") for p in pages):
        print("usage: python -m edgespec.bench.record PAGE.md ...  (regenerates the bench tables in each page)")
        return 0 if pages and pages[0] in ("-h", "--help") else 2
    for page in pages:
        p = Path(page)
        try:
            p.write_text(regenerate(p.read_text(), Path(os.getcwd())))
        except (OSError, ValueError) as e:  # a missing page or record, a marker without its end, bad JSON
            print(f"error: {page}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
