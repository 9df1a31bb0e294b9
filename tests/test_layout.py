"""The code stays readable: folders depend on each other one way, the engine is the loop and
fits in one view, every function outside the bench, the export pipeline and the CLI fits in
one screen, and the drafter contract is small. `pytest tests/test_layout.py -s` prints the
ten longest functions."""

from __future__ import annotations

import ast
import functools
import graphlib
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGE = ("edgespec", "export", "runtimes", "apps")
NAMESPACE = {"edgespec": "edgespec", "export": "edgespec.export", "runtimes": "edgespec.runtimes", "apps": "edgespec.apps"}
DECODE_PATH = ("edgespec/speculative/engine.py", "edgespec/speculative/controller.py", "edgespec/speculative/acceptance.py",
               "edgespec/speculative/cost_curve.py", "edgespec/speculative/verifier.py", "edgespec/drafters/")


@functools.cache
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
    generate = next(lines for lines, where in rows if where.startswith("edgespec/speculative/engine.py") and
                    where.endswith(" _generate"))
    assert generate < 90
    long = [(lines, where) for lines, where in rows if where.startswith(DECODE_PATH) and lines > 80]
    assert not long, long


def test_the_engine_is_the_loop_and_no_function_outside_the_tools_runs_past_sixty_lines():
    assert len((ROOT / "edgespec/speculative/engine.py").read_text().splitlines()) <= 250
    tools = ("edgespec/bench/", "export/", "edgespec/cli/")
    long = [(lines, where) for lines, where in function_lengths() if lines > 60 and not where.startswith(tools)]
    assert not long, long


def test_the_drafter_contract_is_begin_propose_observe_reset_memory_and_a_models_cost():
    from edgespec.speculative.drafter import Drafter

    public = {name for name in dir(Drafter) if not name.startswith("_")}
    assert public == {"name", "cost", "begin", "propose", "observe", "reset", "memory", "models"}
    assert not (ROOT / "edgespec/spec").exists()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[0] = NAMESPACE[parts[0]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str, packages: set[str]) -> str:
    """What a module belongs to: its folder under edgespec (subfolders included), or itself
    for a module at the top of edgespec."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or module in packages else module


def folder_imports() -> dict[str, set[str]]:
    """unit -> the units it imports (at the top of a module or inside a function)."""
    paths = {module_name(p): p for folder in PACKAGE for p in (ROOT / folder).rglob("*.py")}
    packages = {m for m, p in paths.items() if p.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        here = mod if mod in packages else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name in paths and unit(name, packages) != unit(mod, packages):
                    graph.setdefault(unit(mod, packages), set()).add(unit(name, packages))
    return graph


def readme_layout() -> list[str]:
    """The folders of the README's Layout table, top to bottom, as import units."""
    text = (ROOT / "README.md").read_text().split("## Layout", 1)[1]
    cells = [line.split("|")[1].strip().strip("`") for line in text.splitlines() if line.startswith("| `")]
    return [module_name(ROOT / c.rstrip("/") / "__init__.py") if c.endswith("/") else module_name(ROOT / c)
            for c in cells if c != "tests/"]


def test_folders_import_only_the_folders_above_them_in_the_readme():
    """The engine does not know the drafters or the bench; the backends and the drafters do
    not import the export pipeline (what they share, like a trimmed vocabulary's id map,
    lives in runtimes). So the README can list the folders in the order they build on."""
    order = readme_layout()
    upward = [f"{a} imports {b}" for a, deps in folder_imports().items() if a in order
              for b in deps if b in order and order.index(b) > order.index(a)]
    assert not upward, upward
    try:  # nor do the modules at the top of edgespec close a circle
        list(graphlib.TopologicalSorter(folder_imports()).static_order())
    except graphlib.CycleError as e:
        raise AssertionError(f"imports in a circle: {' -> '.join(e.args[1])}") from None
    assert order.index("edgespec.speculative") < order.index("edgespec.drafters") < order.index("edgespec.export")


def test_the_apps_use_the_public_api_only():
    """What `edgespec` exports at its top (and the apps' own modules): an app is built as a
    user would build one."""
    imported = []
    for path in (ROOT / "apps").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("edgespec"):
                imported.append((node.module, path.name))
            elif isinstance(node, ast.Import):
                imported += [(a.name, path.name) for a in node.names if a.name.startswith("edgespec")]
    private = [(m, f) for m, f in imported if m != "edgespec" and not m.startswith("edgespec.apps")]
    assert not private, private
