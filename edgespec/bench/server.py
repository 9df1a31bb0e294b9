"""Does the server cost speed? One streaming request at a time to `edgespec serve`
against the same generation through the Python API (what `edgespec generate`
runs), same model, drafter and prompts, interleaved in one run.

    python3 -m edgespec.bench.server -m qwen2.5-coder-1.5b -d auto -n 128

Both sides are timed the way a user sees them: from the first streamed piece to
the last, so prefill is excluded alike. The server runs in its own process, as
it would in use; only one side runs at a time.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from edgespec import EdgeSpec
from edgespec.bench.common import encode_prompt, load_prompts
from edgespec.bench.record import SERVER, record
from edgespec.drafters import AUTO
from edgespec.models.store import DEFAULT_MODEL, resolve


def time_api(llm: EdgeSpec, row: dict, max_tokens: int) -> tuple[int, float, float]:
    """(tokens, seconds from first piece to last, the engine's own tokens/s)."""
    stream = llm.stream_ids(encode_prompt(row, llm), max_tokens=max_tokens, temperature=0.0)
    first = last = None
    for _ in stream:
        last = time.perf_counter()
        first = first or last
    c = stream.completion
    return len(c.token_ids), (last or 0) - (first or 0), c.stats.tokens_per_s


def time_server(client, model_id: str, row: dict, max_tokens: int) -> tuple[int, float, float]:
    """The same row through the server: `messages` to /v1/chat/completions, `prompt` to /v1/completions."""
    kw = dict(model=model_id, temperature=0, max_tokens=max_tokens, stream=True, stream_options={"include_usage": True})
    if "messages" in row:
        chunks = client.chat.completions.create(messages=row["messages"], **kw)
        text_of = lambda choice: choice.delta.content  # noqa: E731
    else:
        chunks = client.completions.create(prompt=row["prompt"], **kw)
        text_of = lambda choice: choice.text  # noqa: E731
    first = last = None
    tokens, engine_tps = 0, 0.0
    for chunk in chunks:
        if chunk.choices and text_of(chunk.choices[0]):
            last = time.perf_counter()
            first = first or last
        if chunk.choices and chunk.choices[0].finish_reason:
            engine_tps = chunk.model_extra["edgespec"]["tokens_per_s"]
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return tokens, (last or 0) - (first or 0), engine_tps


def start_server(model: str, drafter: str, ctx: int, threads: Optional[int]) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "edgespec", "serve", model, "-d", drafter, "--port", "0", "--ctx", str(ctx)]
    if model != Path(model).name:
        cmd.append("--allow-path")
    if threads:
        cmd += ["--threads", str(threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    m = re.search(r"(http://\S+/v1)", line)
    if m is None:
        proc.kill()
        raise SystemExit(f"error: the server did not start ({line.strip() or 'no output'})")
    return proc, m.group(1)


def main(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m"),
    drafter: str = typer.Option(AUTO, "--drafter", "-d"),
    max_tokens: int = typer.Option(128, "--max-tokens", "-n", min=2),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="JSONL as for `edgespec bench` (default: its set)."),
    limit: int = typer.Option(2, "--limit", help="Prompts per category."),
    ctx: int = typer.Option(4096, "--ctx"),
    threads: Optional[int] = typer.Option(None, "--threads", "-t"),
    json_path: Optional[Path] = typer.Option(None, "--json"),
) -> None:
    from openai import OpenAI

    console = Console(width=max(Console().width, 120))  # piped output is 80 columns: the table needs more
    rows = load_prompts(prompts, limit)
    resolve(model)  # fetch before timing anything
    llm = EdgeSpec(model, drafter=drafter, n_ctx=ctx, threads=threads, quiet=True)
    proc, url = start_server(model, drafter, ctx, threads)
    try:
        client = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
        model_id = client.models.list().data[0].id
        # warm-up, untimed: calibration, first-call allocations, page cache
        time_api(llm, rows[0], 16)
        time_server(client, model_id, rows[0], 16)
        results = []
        for i, row in enumerate(rows):
            order = ("api", "server") if i % 2 == 0 else ("server", "api")  # neither always goes first
            got = {}
            for side in order:
                got[side] = (time_api(llm, row, max_tokens) if side == "api"
                             else time_server(client, model_id, row, max_tokens))
            results.append({"category": row["category"],
                            **{f"{side}_{k}": v for side, (n, s, e) in got.items()
                               for k, v in (("tokens", n), ("seconds", s), ("engine_tokens_per_s", e))}})
            console.print(f"[dim]{i + 1}/{len(rows)} {row['category']}: api {got['api'][0]} tokens "
                          f"{got['api'][1]:.2f}s, server {got['server'][0]} tokens {got['server'][1]:.2f}s[/]")
        llm.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    api_tps, srv_tps = server_speeds(results)
    t = Table("path", "tokens/s (client side)", "engine tokens/s (median)", "x generate",
              title=f"{model}, drafter {drafter}, {len(rows)} prompts x {max_tokens} tokens, streamed")
    t.add_row("generate (Python API)", f"{api_tps:.2f}",
              f"{statistics.median(r['api_engine_tokens_per_s'] for r in results):.2f}", "1.00")
    t.add_row("edgespec serve (openai client, SSE)", f"{srv_tps:.2f}",
              f"{statistics.median(r['server_engine_tokens_per_s'] for r in results):.2f}", f"{srv_tps / api_tps:.3f}")
    console.print(t)
    if json_path:  # a record: `edgespec bench --markdown FILE` prints its table, the docs regenerate it
        json_path.write_text(json.dumps(record(results, model, "python3 -m edgespec.bench.server", kind=SERVER,
                                               drafter=drafter, max_tokens=max_tokens), indent=2))


def server_speeds(rows: list[dict]) -> tuple[float, float]:
    """Tokens/s through the Python API and through the server, over every prompt."""
    return tuple(sum(r[f"{side}_tokens"] for r in rows) / sum(r[f"{side}_seconds"] for r in rows)
                 for side in ("api", "server"))


def table(rec: dict) -> list[str]:
    api, server = server_speeds(rec["rows"])
    return [f"| path ({rec['model']}, `{rec['drafter']}`, {len(rec['rows'])} prompts x {rec['max_tokens']} tokens) "
            "| tokens/s | x generate |", "|---|---:|---:|",
            f"| generate (Python API) | {api:.2f} | 1.00 |",
            f"| `edgespec serve` (openai client, SSE) | {server:.2f} | {server / api:.2f} |"]


if __name__ == "__main__":
    typer.run(main)
