"""What every `edgespec` command shares: the Typer app, the options, errors as one line."""

from __future__ import annotations

import functools
from typing import Callable, Optional

import typer
from rich.console import Console

from edgespec import __version__
from edgespec.errors import EdgespecError
from edgespec.models.store import DEFAULT_MODEL, resolve

# The commands import the engine, numpy and llama.cpp when they run, not at start:
# `edgespec --help`, a refused file and a one-line error answer at once.

app = typer.Typer(
    help="Lossless speculative decoding for on-device LLMs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
models_app = typer.Typer(help="The model store: list, fetch and locate real GGUF models.", no_args_is_help=True)
app.add_typer(models_app, name="models")

out = Console()
err = Console(stderr=True)

ModelOpt = typer.Option(DEFAULT_MODEL, "--model", "-m",
                        help="Model-store name, a .gguf file, or an export folder (ONNX or GGUF).")
# The drafters' names are written out here, not read from the registry, which imports the
# drafters: test_cli holds them to it.
DrafterOpt = typer.Option("auto", "--drafter", "-d",
                          help="none, lookup, ngram, recycle, auto; a drafter model (store name, .gguf or export "
                               "folder; another vocabulary is translated through text); auto+MODEL for the hybrid; "
                               "several, comma-separated (e.g. a drafter and its VocabTrim'd exports), for the "
                               "planner to take the fastest that fits.")
CtxOpt = typer.Option(4096, "--ctx", help="Context size in tokens.")
ThreadsOpt = typer.Option(None, "--threads", "-t", help="CPU threads (default: physical cores).")
FreeThreadsOpt = typer.Option(None, "--threads", "-t", help="CPU threads (default: the physical cores other programs leave free).")
MaxDraftOpt = typer.Option(16, "--max-draft", help="Upper bound on draft tokens per step.")
DeviceOpt = typer.Option("cpu", "--device", help="cpu, gpu (llama.cpp's Vulkan GPU; ONNX Runtime's GPU provider), "
                         "npu (ONNX Runtime's NNAPI, QNN, CoreML) or auto; without one, the CPU, with a notice.")
EpOpt = typer.Option([], "--ep-option", help="KEY=VALUE for ONNX Runtime's chosen execution provider (repeatable), "
                     "e.g. MLComputeUnits=CPUAndNeuralEngine, backend_path=libQnnHtp.so, NNAPI_FLAG_USE_FP16=1.")
BudgetOpt = typer.Option(None, "--memory-budget", "-b",
                         help="Keep the whole process under this much memory, e.g. 900MB or 1.5GB: context, KV cache "
                              "type, drafter and draft length are planned to fit.")


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def user_errors(fn: Callable) -> Callable:
    """Turn the errors a user can fix into one line and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EdgespecError as e:
            fail(str(e))
        except OSError as e:  # an unwritable cache, a full disk: the system's reason and the path
            if caused_by_interrupt(e):
                err.print("interrupted")
                raise typer.Exit(130) from None
            fail(f"{e.filename}: {e.strerror or e}" if e.filename else str(e.strerror or e))
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130)
        except Exception as e:
            if not caused_by_interrupt(e):
                raise
            err.print("interrupted")
            raise typer.Exit(130)

    return wrapper


def caused_by_interrupt(e: BaseException) -> bool:
    """Whether Ctrl-C is behind `e`: a native module interrupted while it loads turns the
    KeyboardInterrupt into its own error (pybind11: ImportError "initialization failed")."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def load(model: str, drafter: str, ctx: int, threads: Optional[int], max_draft: int, budget: Optional[str] = None,
          device: str = "cpu", ep_options: Optional[list[str]] = None):
    from edgespec.api import EdgeSpec
    from edgespec.drafters import check_drafter
    from edgespec.memory.drafter_choice import named_drafters
    from edgespec.runtimes.gpu.devices import DEVICES, parse_ep_options

    if device not in DEVICES:
        fail(f"unknown --device {device!r}: choose one of {', '.join(DEVICES)}")
    options = parse_ep_options(ep_options or [])
    for name in named_drafters(drafter):
        check_drafter(name)  # reject an unknown drafter before loading the target
    path = resolve(model)  # fetches with a progress bar on first use
    first = " (a GPU budget first measures the driver's memory, once: minutes on a software GPU)" \
        if budget is not None and device != "cpu" else ""
    with err.status(f"loading {model}{first}…"):
        llm = EdgeSpec(str(path), drafter=drafter, n_ctx=ctx, threads=threads, max_draft=max_draft,
                       memory_budget=budget, device=device, ep_options=options or None)
        for notice in llm.notices:
            err.print(f"[yellow]notice:[/] {notice}", highlight=False, soft_wrap=True)
        if device != "cpu":
            err.print(f"[dim]device: {llm.backend.device}[/]", highlight=False, soft_wrap=True)
        if budget is not None:
            err.print(f"[dim]memory plan: {llm.plan.summary()}[/]", highlight=False)
            for note in llm.plan.notes:
                err.print(f"[dim]  {note}[/]", highlight=False)
    llm.model_name = model
    return llm


def version_callback(value: bool) -> None:
    if value:
        print(f"edgespec {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True, help="Show the version."),
) -> None:
    pass
