"""A bench run as a record: its rows with the machine and command that produced them,
and the markdown tables the docs show, generated from the record alone.

`edgespec bench --json FILE` writes the record; `edgespec bench --markdown FILE`
prints its tables. The docs keep each table between markers naming its record
(`<!-- bench docs/bench/NAME.json -->` ... `<!-- end bench -->`), and a test
regenerates every one of them byte for byte, so a table cannot drift from its data.
"""

from __future__ import annotations

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
START = re.compile(r"<!-- bench (\S+?)( headline)? -->\n")
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


def record(rows: list[dict], model: str) -> dict:
    return {"date": time.strftime("%Y-%m-%d"), "command": "edgespec " + shlex.join(sys.argv[1:]),
            "model": model, "machine": machine(), "rows": rows}


def rows_of(data: dict | list) -> list[dict]:
    """The rows of a record (or of a bare list of rows)."""
    return data["rows"] if isinstance(data, dict) else data


def markdown(rec: dict, headline: bool = False) -> str:
    """The record's table: every row, or (headline) plain, edgespec's default and the best
    llama-server type per category."""
    m = rec["machine"]
    cores = f"{m['physical_cores']} cores" if m.get("physical_cores") else f"{m['logical_cores']} logical cores"
    lines = [f"{rec['model']} on {m['cpu']} ({cores}, {', '.join(m['simd']).upper() or 'no SIMD flags'}), "
             f"{rec['date']}: `{rec['command']}`", ""]
    lines += _headline(rec["rows"]) if headline else _full(rec["rows"])
    return "\n".join(lines) + "\n"


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _full(rows: list[dict]) -> list[str]:
    peers = any("x_best_peer" in r for r in rows)
    out = ["| category | method | tok/s | x plain |" + (" x best peer |" if peers else "") + " accepted |",
           "|---|---|---|---|" + ("---|" if peers else "") + "---|"]
    for r in rows:
        cells = [r["category"], r["drafter"], _fmt(r.get("tokens_per_s")), _fmt(r.get("ratio_to_plain"))]
        cells += [_fmt(r.get("x_best_peer"))] if peers else []
        cells += [_fmt(r.get("acceptance_rate"), ".0%")]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _headline(rows: list[dict]) -> list[str]:
    out = ["| | " + " | ".join(_categories(rows)) + " |", "|---|" + "---|" * len(_categories(rows))]
    by = {(r["category"], r["drafter"]): r for r in rows}
    best = {c: max((r for r in rows if r["category"] == c and r["drafter"].startswith("llama-server:")),
                   key=lambda r: r["ratio_to_plain"] or 0, default=None) for c in _categories(rows)}
    lines = [
        ("plain llama.cpp, tok/s", lambda c: _fmt(by[(c, "plain")]["tokens_per_s"])),
        ("edgespec `auto`, x plain", lambda c: _fmt(by[(c, "auto")]["ratio_to_plain"])),
        ("best llama-server `--spec-type`, x its plain",
         lambda c: f"{_fmt(best[c]['ratio_to_plain'])} ({best[c]['drafter'].split(':', 1)[1]})" if best[c] else "-"),
        ("edgespec `auto` against it", lambda c: _fmt(by[(c, "auto")].get("x_best_peer"))),
    ]
    for label, cell in lines:
        out.append(f"| {label} | " + " | ".join(cell(c) for c in _categories(rows)) + " |")
    return out


def _categories(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["category"] for r in rows))


def regenerate(text: str, root: Path) -> str:
    """`text` (a docs page) with every bench table regenerated from the record it names."""
    out, pos = [], 0
    for m in START.finditer(text):
        end = text.index(END, m.end())
        rec = json.loads((root / m.group(1)).read_text())
        out += [text[pos:m.end()], markdown(rec, headline=bool(m.group(2)))]
        pos = end
    return "".join(out) + text[pos:]


if __name__ == "__main__":  # python -m edgespec.bench.record PAGE.md ...: rewrite their tables in place
    for page in sys.argv[1:]:
        p = Path(page)
        p.write_text(regenerate(p.read_text(), Path(os.getcwd())))
