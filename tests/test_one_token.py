"""`python3 -m edgespec.bench.one_token`: one token's time on each build against llama-server's
in the same rounds, so the machine's drift between rounds falls on both."""

import subprocess
import sys

import pytest

from edgespec.bench.one_token import _Engine, rows_of
from edgespec.bench.record import ONE_TOKEN, markdown
from edgespec.errors import EdgespecError


def test_a_build_is_compared_with_llama_server_round_by_round():
    drift = [30.0, 36.0, 33.0, 39.0, 31.0, 35.0]  # the machine's, shared by every row of a round
    rows = {r["build"]: r for r in rows_of({"this build": [1.05 * t for t in drift], "llama-server": drift})}
    ours, theirs = rows["this build"], rows["llama-server"]
    assert ours["against_server"] == 1.05 and ours["interval"] == [1.05, 1.05]  # the drift cancels
    assert ours["ms_per_token"] == 1.05 * 34.0 and theirs["against_server"] == 1.0
    assert ours["rounds"] == 6


def test_its_record_is_a_table_of_builds():
    rows = rows_of({"this build": [30.0, 31.0], "llama-server": [30.0, 30.0]})
    rec = {"date": "2026-12-06", "command": "python3 -m edgespec.bench.one_token", "model": "m", "rows": rows,
           "machine": {"cpu": "cpu", "physical_cores": 2, "simd": []}, "kind": ONE_TOKEN, "max_tokens": 64,
           "prompt_tokens": 200, "threads": 2, "category": "chat"}
    table = markdown(rec)
    assert "| this build | 30.50 | 1.017 |" in table and "after a 200-token chat prompt" in table
    assert "each of 2 rounds runs every row once" in table


def test_a_contestant_that_dies_is_one_clear_error():
    engine = _Engine.__new__(_Engine)  # a child that exits at once, as one that crashed mid-run
    engine.where = "/tmp/some-build"
    engine.proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True)
    engine.proc.wait()
    with pytest.raises(EdgespecError, match="edgespec on /tmp/some-build stopped"):
        engine.ms_per_token([1, 2, 3])
    engine.close()
