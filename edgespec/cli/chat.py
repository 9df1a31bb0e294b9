"""edgespec chat: a conversation in the terminal."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from typing import Iterator, Optional

import typer

from edgespec.cli.common import (BudgetOpt, CtxOpt, DeviceOpt, DrafterOpt, EpOpt, FreeThreadsOpt, MaxDraftOpt, ModelOpt,
                                 app, err, load, out, user_errors)
from edgespec.errors import EdgespecError


@app.command()
@user_errors
def chat(
    model: str = ModelOpt,
    drafter: str = DrafterOpt,
    system: Optional[str] = typer.Option(None, "--system", help="A system message."),
    max_tokens: int = typer.Option(1024, "--max-tokens", "-n", min=1),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0),
    seed: Optional[int] = typer.Option(None, "--seed"),
    ctx: int = CtxOpt,
    threads: Optional[int] = FreeThreadsOpt,
    max_draft: int = MaxDraftOpt,
    memory_budget: Optional[str] = BudgetOpt,
    device: str = DeviceOpt,
    ep_option: list[str] = EpOpt,
    plain: bool = typer.Option(False, "--plain", help="Print answers as plain text (a terminal otherwise gets "
                               "them rendered as Markdown while they stream)."),
    json_answers: bool = typer.Option(False, "--json", help="Every answer is a JSON object (OpenAI's "
                                      "response_format json_object), printed as it streams."),
) -> None:
    """Chat in the terminal. Commands: /reset, /stats, /memory, /quit.

    With no options it runs on the default model, fetched on first use.
    Example: edgespec chat -m smollm2-135m --memory-budget 400MB
    """
    llm = load(model, drafter, ctx, threads, max_draft, memory_budget, device, ep_option)
    grammar = llm.grammar(response_format={"type": "json_object"}) if json_answers else None
    base = [{"role": "system", "content": system}] if system else []
    messages = list(base)
    err.print(f"[dim]edgespec chat · {llm.model_name} · drafter {llm.drafter_name} · /reset /stats /memory /quit[/]", highlight=False)
    while True:
        try:
            line = input("> ")
        except EOFError:
            break
        except KeyboardInterrupt:
            err.print()
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            break
        if text == "/reset":
            messages = list(base)
            llm.reset()
            err.print("[dim]conversation cleared[/]")
            continue
        if text == "/stats":
            err.print_json(json.dumps(llm.last_stats.to_dict()))
            continue
        if text == "/memory":
            err.print_json(json.dumps(llm.footprint()))
            continue
        messages.append({"role": "user", "content": line})
        try:
            ids, dropped = llm.fit_messages(messages, max_tokens, keep=len(base))
            if dropped:
                err.print(f"[dim](the oldest {dropped} turn(s) dropped to fit the context)[/]")
        except EdgespecError as e:
            messages.pop()
            err.print(f"[bold red]error:[/] {e}; the message was not sent, the chat goes on", highlight=False,
                      soft_wrap=True)
            continue
        stream = llm.stream_ids(ids, max_tokens=max_tokens, temperature=temperature, seed=seed, grammar=grammar)
        with _ctrl_c_cancels(stream):
            _show_answer(stream, markdown=not (plain or json_answers) and out.is_terminal)
        messages.append({"role": "assistant", "content": stream.completion.text})
        err.print(f"[dim]{stream.completion.stats.summary()}[/]", highlight=False)


@contextlib.contextmanager
def _ctrl_c_cancels(stream) -> Iterator[None]:
    """While an answer streams, Ctrl-C cancels it instead of raising KeyboardInterrupt:
    the engine stops between two steps, so its KV cache stays consistent and the
    answer so far is kept (an exception inside the generator would lose both)."""
    previous = signal.signal(signal.SIGINT, lambda *_: stream.cancel())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _show_answer(stream, markdown: bool) -> None:
    """Stream an answer: re-rendered as Markdown in a terminal (code blocks, lists),
    as plain text into a pipe."""
    if not markdown:
        for piece in stream:
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
        return
    from rich.live import Live
    from rich.markdown import Markdown

    text = ""
    with Live(Markdown(text), console=out, refresh_per_second=12, vertical_overflow="visible") as live:
        for piece in stream:
            text += piece
            live.update(Markdown(text))
