"""edgespec models: the model store (list, fetch, path, verify)."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from edgespec.cli.common import models_app, out, user_errors
from edgespec.models.store import MODELS, cached_path, fetch, is_cached, resolve, spec, verify


@models_app.command("list")
@user_errors
def models_list(json_out: bool = typer.Option(False, "--json")) -> None:
    """The models edgespec can fetch, and which are cached.

    Example: edgespec models list --json
    """
    rows = [
        {"name": m.name, "description": m.description, "role": m.role, "size": m.size,
         "cached": is_cached(m.name), "path": str(cached_path(m.name))}
        for m in MODELS.values()
    ]
    if json_out:
        print(json.dumps(rows, indent=2))
        return
    # the name is what a user types next: never cut; the prose columns wrap instead
    t = Table()
    t.add_column("name", no_wrap=True, min_width=max(len(r["name"]) for r in rows))
    t.add_column("size", no_wrap=True, justify="right")
    t.add_column("cached", no_wrap=True)
    t.add_column("description", overflow="fold")
    t.add_column("role", overflow="fold")
    for r in rows:
        t.add_row(r["name"], f"{r['size'] / 1e6:,.0f} MB", "yes" if r["cached"] else "-", r["description"], r["role"])
    out.print(t)


@models_app.command("fetch")
@user_errors
def models_fetch(
    names: list[str] = typer.Argument(..., help="Model names (see `edgespec models list`)."),
    force: bool = typer.Option(False, "--force", help="Fetch again even if cached."),
) -> None:
    """Download, assemble and verify models into the cache.

    Example: edgespec models fetch smollm2-135m qwen2.5-coder-0.5b
    """
    for name in names:
        spec(name)
    for name in names:
        path = fetch(name, force=force)
        out.print(f"{name}: {path}", highlight=False)


@models_app.command("path")
@user_errors
def models_path(name: str) -> None:
    """Print the local path of a model, fetching it first if needed.

    Example: ls -l "$(edgespec models path smollm2-135m)"
    """
    print(resolve(name))


@models_app.command("verify")
@user_errors
def models_verify(name: str) -> None:
    """Re-hash a cached model against its pinned sha256.

    Example: edgespec models verify qwen2.5-coder-1.5b
    """
    out.print(f"{name}: ok ({verify(name)})", highlight=False)
