"""edgespec serve: the OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgespec.cli.common import (BudgetOpt, CtxOpt, DeviceOpt, DrafterOpt, EpOpt, FreeThreadsOpt, MaxDraftOpt, app, err,
                                 fail, load, user_errors)
from edgespec.models.store import DEFAULT_MODEL, MODELS


@app.command()
@user_errors
def serve(
    model: str = typer.Argument(DEFAULT_MODEL, help="Model-store name (or, with --allow-path, a .gguf file or export folder)."),
    drafter: str = DrafterOpt,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; loopback unless you mean otherwise."),
    port: int = typer.Option(8080, "--port", "-p", min=0, max=65535, help="Port (0: any free port)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="EDGESPEC_API_KEY",
                                          help="Require 'Authorization: Bearer KEY' on /v1 requests."),
    cors_origin: list[str] = typer.Option([], "--cors-origin", help="Allow browser pages from this origin "
                                          "(repeatable; CORS is closed by default)."),
    allow_path: bool = typer.Option(False, "--allow-path", help="Serve a model file outside the model store."),
    max_queue: int = typer.Option(8, "--max-queue", min=1, help="Requests that may wait behind the running one."),
    max_tokens_limit: int = typer.Option(4096, "--max-tokens-limit", min=1, help="Largest max_tokens a request may ask."),
    max_body: int = typer.Option(1 << 20, "--max-body", min=1024, help="Largest request body in bytes."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0.1, help="Stop a request not answered "
                                            "within this many seconds (504)."),
    allowed_host: list[str] = typer.Option([], "--allowed-host", help="Without --api-key, also answer requests "
                                           "whose Host header names this (repeatable; loopback always)."),
    ctx: int = CtxOpt,
    threads: Optional[int] = FreeThreadsOpt,
    max_draft: int = MaxDraftOpt,
    memory_budget: Optional[str] = BudgetOpt,
    device: str = DeviceOpt,
    ep_option: list[str] = EpOpt,
) -> None:
    """Serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models).

    Example: edgespec serve smollm2-135m -d auto --port 8080, then
    OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="none").chat.completions.create(model="smollm2-135m", ...)
    """
    from edgespec.apps.server import Limits, LocalServer

    if model not in MODELS and not allow_path:
        fail(f"{model!r} is not in the model store ({', '.join(MODELS)}); to serve a file from elsewhere, "
              "start with --allow-path")
    if host not in ("127.0.0.1", "localhost", "::1") and api_key is None:
        err.print(f"[yellow]warning:[/] listening on {host} without --api-key: anyone who reaches this port can "
                  "use the model", highlight=False)
    llm = load(model, drafter, ctx, threads, max_draft, memory_budget, device, ep_option)
    model_id = model if model in MODELS else Path(model).name
    limits = Limits(max_body_bytes=max_body, max_tokens=max_tokens_limit, max_queue=max_queue, timeout_s=timeout)

    def ready(url: str) -> None:
        print(f"edgespec serve: {url} (model {model_id}, drafter {llm.drafter_name}); Ctrl-C stops", flush=True)

    try:
        LocalServer(llm, model_id, host, port, limits, api_key, cors_origin or None,
                    set(allowed_host)).run(on_ready=ready)
    finally:
        llm.close()
