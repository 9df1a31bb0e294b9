"""edgespec generate: one answer to a prompt, streamed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from edgespec.cli.common import (BudgetOpt, CtxOpt, DeviceOpt, DrafterOpt, EpOpt, FreeThreadsOpt, MaxDraftOpt, ModelOpt,
                                 app, err, load, user_errors)
from edgespec.errors import EdgespecError


@app.command()
@user_errors
def generate(
    prompt: str = typer.Argument(..., help="The prompt; '-' reads it from standard input."),
    model: str = ModelOpt,
    drafter: str = DrafterOpt,
    max_tokens: int = typer.Option(256, "--max-tokens", "-n", min=1),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="0 is greedy."),
    top_k: int = typer.Option(0, "--top-k", min=0),
    top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0),
    seed: Optional[int] = typer.Option(None, "--seed"),
    chat: bool = typer.Option(False, "--chat", help="Wrap the prompt as a user message in the model's chat template."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object: text, prompt_ids, token_ids, stats."),
    json_schema: Optional[Path] = typer.Option(None, "--json-schema", help="A JSON schema file: the answer is JSON "
                                               "valid against it."),
    ctx: int = CtxOpt,
    threads: Optional[int] = FreeThreadsOpt,
    max_draft: int = MaxDraftOpt,
    memory_budget: Optional[str] = BudgetOpt,
    device: str = DeviceOpt,
    ep_option: list[str] = EpOpt,
) -> None:
    """Complete a prompt.

    Example: edgespec generate "def quicksort(xs):" -m smollm2-135m -d lookup -n 64 --json
    (--json-schema person.json --chat: the answer is JSON valid against the schema)
    """
    if prompt == "-":
        prompt = sys.stdin.read()
    schema = _read_schema(json_schema) if json_schema is not None else None
    llm = load(model, drafter, ctx, threads, max_draft, memory_budget, device, ep_option)
    kw = dict(max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
              grammar=llm.grammar(json_schema=schema) if schema is not None else None)
    ids = llm.chat_ids([{"role": "user", "content": prompt}]) if chat else llm.tokenize(prompt)
    stream = llm.stream_ids(ids, **kw)
    if json_out:
        for _ in stream:
            pass
        print(json.dumps(stream.completion.to_dict(), ensure_ascii=False))
        return
    for piece in stream:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    err.print(f"[dim]{stream.completion.stats.summary()}[/]", highlight=False)


def _read_schema(path: Path) -> dict:
    """The JSON schema in `path`, read before the model loads: a typo costs no wait."""
    try:
        schema = json.loads(path.read_text())
    except UnicodeDecodeError as e:
        raise EdgespecError(f"{path} is not a text file: {e}") from None
    except ValueError as e:
        raise EdgespecError(f"{path} is not JSON: {e}") from None
    if not isinstance(schema, dict):
        raise EdgespecError(f"{path} holds no JSON schema: a schema is an object")
    return schema
