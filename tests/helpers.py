"""Helpers the test files share: the CLI as a user runs it, what a refusal must look like, a
scripted backend, a controller that verifies every proposal, and the docs' own drafter."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from edgespec.drafters import REGISTRY, Registered
from edgespec.runtimes.reference import ByteTokenizer
from edgespec.speculative.backend import Backend
from edgespec.speculative.controller import DraftController


def edgespec(*args, stdin=None, timeout=600, env=None) -> subprocess.CompletedProcess:
    """`edgespec ARGS` in a child process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "edgespec", *map(str, args)], input=stdin, capture_output=True,
                          text=True, timeout=timeout, env=env)


def register_the_docs_drafter(monkeypatch) -> str:
    """docs/usage.md's "Writing a drafter" as written, its file and its registry line, registered
    for one test; returns its name."""
    usage = (Path(__file__).parents[1] / "docs" / "usage.md").read_text()
    section = usage.split("## Writing a drafter", 1)[1]
    drafter_file, registry_line = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    space: dict = {"Registered": Registered}
    exec(drafter_file, space)
    exec(f"line = {{{registry_line.strip().rstrip(',')}}}", space)
    (name, entry), = space["line"].items()
    monkeypatch.setitem(REGISTRY, name, entry)
    return name


def bench_rows(tmp_path, *args) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    """`edgespec bench ARGS --json`: the run, and its rows over all prompts by method."""
    out = tmp_path / "bench.json"
    r = edgespec("bench", *args, "--json", out)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    return r, {row["drafter"]: row for row in rows if row["category"] == "all"}


def assert_one_line_error(r: subprocess.CompletedProcess, pattern: str) -> None:
    """Exit 1, no traceback, and one line on stderr: 'error: ...' holding `pattern`."""
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error:") and pattern in lines[0], lines[0]


class ScriptedBackend(Backend):
    """A 'model' that greedily emits a fixed byte string, then EOS: for testing
    streaming, stopping and cancellation without a real model."""

    name = "scripted"

    def __init__(self, text: str, n_ctx: int = 4096) -> None:
        self.tokenizer = ByteTokenizer()
        self.script = list(text.encode("utf-8")) + [ByteTokenizer.EOS]
        self.n_ctx = n_ctx
        self._n_past = 0
        self._prompt_len: int | None = None

    @property
    def n_past(self) -> int:
        return self._n_past

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        if self._prompt_len is None or self._n_past < self._prompt_len:
            self._prompt_len = self._n_past + len(ids)
        rows = []
        for _ in ids:
            self._n_past += 1
            i = self._n_past - self._prompt_len  # tokens generated after this position
            row = np.zeros(self.tokenizer.n_vocab, dtype=np.float32)
            row[self.script[min(max(i, 0), len(self.script) - 1)]] = 10.0
            rows.append(row)
        n_logits = len(ids) if n_logits is None else n_logits
        return np.array(rows[len(rows) - n_logits :])

    def rollback(self, n_past: int) -> None:
        self._n_past = n_past
        if self._prompt_len is not None and n_past < self._prompt_len:
            self._prompt_len = None

    def memory(self) -> dict[str, int]:
        return {}


def always_draft(max_k: int = 8) -> DraftController:
    """A controller that believes verification is free, so every proposal is
    verified in full: the strictest exercise of the verifier and rollback."""
    c = DraftController(max_k=max_k)
    c.cost.set_timed({n: 1.0 for n in range(1, max_k + 2)})
    c.cost.alpha = 0.0  # the engine's real timings must not change that belief
    return c
