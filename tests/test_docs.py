"""The docs stay true to their data and short enough to read: every bench table is
generated from a record that names its machine and command, and the README fits a
few screens with no history in it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from edgespec.bench.record import START, markdown, regenerate

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HISTORY = re.compile(r"session [0-9]|issue #?[0-9]|earlier run|run 1|run 2", re.IGNORECASE)


def test_every_bench_table_regenerates_from_its_record_byte_for_byte():
    tables = 0
    for page in PAGES:
        text = page.read_text()
        tables += len(START.findall(text))
        assert regenerate(text, ROOT) == text, f"rerun: python -m edgespec.bench.record {page.relative_to(ROOT)}"
    assert tables >= 2  # the README's headline and the benchmarks page


def test_each_bench_record_names_its_machine_command_and_date():
    records = sorted((ROOT / "docs" / "bench").glob("*.json"))
    assert records
    for path in records:
        rec = json.loads(path.read_text())
        assert rec["command"].startswith(("edgespec bench", "edgespec profile", "python3 -m edgespec.bench."))
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", rec["date"])
        assert rec["machine"]["cpu"] and rec["machine"]["logical_cores"] and rec["machine"]["llama_cpp"]
        assert rec["rows"]


def test_a_simulated_or_projected_run_says_so_in_its_table():
    machine = {"cpu": "Some CPU", "physical_cores": 2, "logical_cores": 2, "simd": ["avx2"], "llama_cpp": "x"}
    fpga = {"category": "code", "method": "lookup", "simulated_tokens_per_s": 38.93, "simulated_speedup": 1.671,
            "simulated_joules_per_token": 0.1284, "acceptance": 0.64}
    gpu = {"device_profile": "adreno-750", "category": "code", "method": "auto", "projected_tokens_per_s": 74.21,
           "projected_speedup": 2.37, "acceptance": None}
    fpga_table = markdown({"model": "m", "date": "2026-01-01", "command": "edgespec bench", "machine": machine,
                           "rows": [fpga]})
    gpu_table = markdown({"model": "m", "date": "2026-01-01", "command": "edgespec bench", "machine": machine,
                          "rows": [gpu]})
    assert "| simulated tok/s |" in fpga_table and "| code | lookup | 38.93 | 1.67 | 0.128 | 64% |" in fpga_table
    assert "| PROJECTED tok/s |" in gpu_table and "| adreno-750 | code | auto | 74.2 | 2.37 | - |" in gpu_table


def test_the_readme_fits_250_lines_and_the_docs_tell_no_history():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    for page in PAGES:
        hits = [line for line in page.read_text().splitlines() if HISTORY.search(line)]
        assert not hits, f"{page.name}: {hits[:3]}"


def test_the_readme_opens_with_the_two_set_up_commands_and_ci_runs_the_second():
    first_screen = (ROOT / "README.md").read_text().splitlines()[:24]
    commands = [line for line in first_screen if line.startswith("./install.sh")]
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./install.sh --dev" in ci and "python3 -m pytest" in ci


def test_a_curve_table_says_how_its_record_timed_the_curves():
    machine = {"cpu": "Some CPU", "physical_cores": 2, "logical_cores": 2, "simd": ["avx2"], "llama_cpp": "x"}
    plain = {"drafter": "plain", "category": "all", "batch_costs_ms": [30.0, 54.0, 66.0]}

    def table(row: dict) -> str:
        return markdown({"model": "m", "date": "2026-01-01", "command": "edgespec bench", "machine": machine,
                         "rows": [row]}, "curves")

    assert "| llama.cpp | 30.0 | 1.80 | 2.20 | - |" in table(plain)
    assert "Each size the median of 3 timings, one after each category's prompts." in table(
        {**plain, "batch_cost_timings": 3})
    assert "Timed once, after the runs." in table(plain)  # a record from before the count was kept
