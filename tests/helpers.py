"""Helpers the test files share: the CLI as a user runs it, and what a refusal must look like."""

from __future__ import annotations

import subprocess
import sys


def edgespec(*args, stdin=None, timeout=600, env=None) -> subprocess.CompletedProcess:
    """`edgespec ARGS` in a child process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "edgespec", *map(str, args)], input=stdin, capture_output=True,
                          text=True, timeout=timeout, env=env)


def assert_one_line_error(r: subprocess.CompletedProcess, pattern: str) -> None:
    """Exit 1, no traceback, and one line on stderr: 'error: ...' holding `pattern`."""
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error:") and pattern in lines[0], lines[0]
