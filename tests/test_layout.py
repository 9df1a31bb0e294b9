"""The code stays readable: the speculation loop is short, and so is every function on
the decode path. `pytest tests/test_layout.py -s` prints the ten longest functions."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGE = ("edgespec", "export", "runtimes", "apps")
DECODE_PATH = ("edgespec/engine.py", "edgespec/controller.py", "edgespec/verifier.py", "edgespec/drafters/")


def function_lengths() -> list[tuple[int, str]]:
    """(lines, 'file:line name') for every function of the package, longest first."""
    rows = []
    for folder in PACKAGE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                    rows.append((node.end_lineno - node.lineno + 1, where))
    return sorted(rows, reverse=True)


def test_the_speculation_loop_and_the_decode_path_stay_short():
    rows = function_lengths()
    print("\nthe ten longest functions:")
    for lines, where in rows[:10]:
        print(f"{lines:5d}  {where}")
    generate = next(lines for lines, where in rows if where.startswith("edgespec/engine.py") and
                    where.endswith(" _generate"))
    assert generate < 90
    long = [(lines, where) for lines, where in rows if where.startswith(DECODE_PATH) and lines > 80]
    assert not long, long
