"""What the bench's commands share: the prompts, one method's run, how a run is timed."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Sequence

from rich.console import Console

from edgespec.errors import EdgespecError
from edgespec.speculative.cpu_load import OtherLoad, contends

LCP = "llama-cpp-python"  # the default peer: its own generation, plain and with its prompt lookup

# the prompts that ship with edgespec, by name: the 12 drafting was tuned on, 18 held out from that
SHIPPED = {"shipped": ["bench_prompts"], "heldout": ["heldout_prompts"], "all": ["bench_prompts", "heldout_prompts"],
           # answers held to a JSON schema or to tool calls: 4 shipped, then 6 held out
           "structured": ["structured_prompts", "structured_heldout_prompts"]}


def load_prompts(path: Path | None, limit: int | None = None, categories: Sequence[str] = ()) -> list[dict]:
    """Rows of {category, prompt} or {category, messages} from a JSONL file, or a shipped set by
    name (`SHIPPED`); "shipped" by default. `categories`: only rows of these (all when empty)."""
    name = "shipped" if path is None else str(path)
    if name in SHIPPED and (path is None or not Path(path).exists()):
        text = "\n".join(resources.files("edgespec").joinpath(f"data/{f}.jsonl").read_text() for f in SHIPPED[name])
        source = f"the shipped prompts ({name})"
    else:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise EdgespecError(f"cannot read prompts file {path}: {e.strerror}") from None
        source = str(path)
    rows, seen = [], defaultdict(int)
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise EdgespecError(f"{source}, line {i}: not JSON ({e})") from None
        if not isinstance(row, dict) or "category" not in row or ("prompt" in row) == ("messages" in row):
            raise EdgespecError(f"{source}, line {i}: needs 'category' and one of 'prompt' or 'messages'")
        if categories and row["category"] not in categories:
            continue
        seen[row["category"]] += 1
        if limit is None or seen[row["category"]] <= limit:
            rows.append(row)
    if not rows:
        raise EdgespecError(f"{source} holds no prompts" + (f" of category {', '.join(categories)}" if categories else ""))
    return rows


@dataclass
class Run:
    tokens: list[int]
    decode_s: float  # first token to last
    drafted: int = 0
    accepted: int = 0
    overhead_ms: float = 0.0  # engine time per token outside the backend
    steps: int = 0
    position: list[tuple[int, int]] = field(default_factory=list)
    drafter_steps: int = 0  # one-token evaluations of a model drafter, and their seconds
    draft_s: float = 0.0
    by_key: dict[str, list[int]] = field(default_factory=dict)  # drafter kind -> [drafted, accepted]
    forced: int = 0  # tokens a grammar forced (structured prompts)
    grammar_s: float = 0.0  # the grammar's time: masks, forced tokens, checks
    drafter_model_s: float = 0.0  # a model drafter's own evaluations while drafting (not the prompt's read)


def encode_prompt(row: dict, llm) -> list[int]:
    """A prompt row's token ids: `messages` through the model's chat template (with the row's
    `tools`, if it offers some), `prompt` as plain text."""
    from edgespec.structured.tools import Tools

    if "messages" not in row:
        return llm.tokenize(row["prompt"])
    fmt = output_format(row)
    return llm.chat_ids(row["messages"], Tools(**fmt) if fmt and "tools" in fmt else None)


def output_format(row: dict) -> dict | None:
    """What a prompt row holds its answer to: {"response_format": ...} or {"tools": ...,
    "choice": ..., "parallel": ...} (Tools' arguments), or None for free text."""
    if "tools" in row:
        return {"tools": row["tools"], "choice": row.get("tool_choice", "auto"),
                "parallel": row.get("parallel_tool_calls", True)}
    return {"response_format": row["response_format"]} if "response_format" in row else None


def timed(stream: Iterable[int]) -> tuple[list[int], float]:
    toks: list[int] = []
    t_first = None
    for t in stream:
        if t_first is None:
            t_first = time.perf_counter()
        toks.append(t)
    return toks, (time.perf_counter() - t_first) if t_first else 0.0


def print_wide(console: Console, table, width: int) -> None:
    """Print a table at least `width` columns wide: piped output is 80 columns, too narrow
    for the bench's and profile's tables."""
    Console(file=console.file, width=max(console.width, width), force_terminal=console.is_terminal).print(table)


def report_load(load: OtherLoad, threads: int, console: Console) -> float | None:
    """Says how busy other processes kept the cores while the methods were timed: with
    llama.cpp's threads waiting on them, the timings would describe that load."""
    cores = load.cores()
    if contends(cores, threads):
        console.print(f"[yellow]warning: other processes kept {cores:.2f} cores busy while the methods were timed, "
                      f"and the bench's {threads} threads wanted {threads} of {os.cpu_count()} cores: these timings "
                      "describe that load. Run the bench on an otherwise idle machine.[/]", highlight=False)
    elif cores is not None:
        console.print(f"[dim]other processes kept {cores:.2f} cores busy while the methods were timed[/]",
                      highlight=False)
    return cores
