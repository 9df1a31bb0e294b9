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
    from edgespec.bench import rows as bench_rows

    full = fpga.table if "simulated_tokens_per_s" in rows[0] else \
        simulated.table if "device_profile" in rows[0] else bench_rows.markdown_full
    views = {"headline": bench_rows.markdown_headline, "curves": bench_rows.markdown_curves,
             "forced": forced.markdown_lines}
    return views.get(view, full)(rows)


def emit(rec: dict, path: Path | None) -> int:
    """A module's record: its table printed, and the record written to `path` if one is given."""
    print("\n".join(kind_table(rec)))
    if path:
        path.write_text(json.dumps(rec, indent=2) + "\n")
    return 0


def fmt_cell(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


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
