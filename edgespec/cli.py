"""The `edgespec` command: chat, generate, bench, export, models."""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import sys
from pathlib import Path
from typing import Callable, Iterator, Optional

import typer
from rich.console import Console
from rich.table import Table

from .errors import EdgespecError
from .store import DEFAULT_MODEL
from .verifier import SamplingParams

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


def _fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def user_errors(fn: Callable) -> Callable:
    """Turn the errors a user can fix into one line and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EdgespecError as e:
            _fail(str(e))
        except OSError as e:  # an unwritable cache, a full disk: the system's reason and the path
            if _caused_by_interrupt(e):
                err.print("interrupted")
                raise typer.Exit(130) from None
            _fail(f"{e.filename}: {e.strerror or e}" if e.filename else str(e.strerror or e))
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130)
        except Exception as e:
            if not _caused_by_interrupt(e):
                raise
            err.print("interrupted")
            raise typer.Exit(130)

    return wrapper


def _caused_by_interrupt(e: BaseException) -> bool:
    """Whether Ctrl-C is behind `e`: a native module interrupted while it loads turns the
    KeyboardInterrupt into its own error (pybind11: ImportError "initialization failed")."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _load(model: str, drafter: str, ctx: int, threads: Optional[int], max_draft: int, budget: Optional[str] = None,
          device: str = "cpu", ep_options: Optional[list[str]] = None):
    from .api import EdgeSpec
    from .drafters import check_drafter
    from .planner import named_drafters
    from .runtimes.devices import DEVICES, parse_ep_options
    from .store import resolve

    if device not in DEVICES:
        _fail(f"unknown --device {device!r}: choose one of {', '.join(DEVICES)}")
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
    ctx: int = CtxOpt,
    threads: Optional[int] = FreeThreadsOpt,
    max_draft: int = MaxDraftOpt,
    memory_budget: Optional[str] = BudgetOpt,
    device: str = DeviceOpt,
    ep_option: list[str] = EpOpt,
) -> None:
    """Complete a prompt.

    Example: edgespec generate "def quicksort(xs):" -m smollm2-135m -d lookup -n 64 --json
    """
    if prompt == "-":
        prompt = sys.stdin.read()
    llm = _load(model, drafter, ctx, threads, max_draft, memory_budget, device, ep_option)
    kw = dict(max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
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
) -> None:
    """Chat in the terminal. Commands: /reset, /stats, /memory, /quit.

    With no options it runs on the default model, fetched on first use.
    Example: edgespec chat -m smollm2-135m --memory-budget 400MB
    """
    llm = _load(model, drafter, ctx, threads, max_draft, memory_budget, device, ep_option)
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
        stream = llm.stream_ids(ids, max_tokens=max_tokens, temperature=temperature, seed=seed)
        with _ctrl_c_cancels(stream):
            _show_answer(stream, markdown=not plain and out.is_terminal)
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


@app.command()
@user_errors
def bench(
    model: str = ModelOpt,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="JSONL: {category, prompt} or {category, messages}; "
                                           "or a shipped set: shipped (the default), heldout, all."),
    drafters: str = typer.Option("lookup,ngram,recycle,auto", "--drafters", help="Comma-separated edgespec drafters."),
    max_tokens: int = typer.Option(256, "--max-tokens", "-n", min=1),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the run here: its rows, the machine "
                                             "and the command (what the docs' tables are generated from)."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Print the tables of a run written by --json "
                                            "as markdown, and run nothing."),
    ctx: int = CtxOpt,
    threads: Optional[int] = ThreadsOpt,
    max_draft: int = MaxDraftOpt,
    peer: bool = typer.Option(True, "--peer/--no-peer", help="Include llama-cpp-python's own prompt lookup."),
    peers: str = typer.Option("", "--peers", help="llama-server: also run llama.cpp's server (built by "
                              "./install.sh --dev) plain and with each of its speculation types, as rows llama-server:*."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Use only the first N prompts of each category."),
    onnx: Optional[str] = typer.Option(None, "--onnx", help="An ONNX export of the same model: also run it on ONNX Runtime."),
    backend: str = typer.Option("cpu", "--backend", help="cpu (measured here) or fpga-sim (acceptance measured here, "
                                "tokens/s and energy simulated for TeLLMe v2's design on a KV260)."),
    device: str = typer.Option("cpu", "--device", help="Comma-separated devices to measure side by side, e.g. "
                               "cpu,gpu: rows of other devices are named gpu:plain, gpu:lookup, ..."),
    device_profile: Optional[str] = typer.Option(None, "--device-profile", help="Comma-separated device profiles "
                                                 "(adreno-750, mali-g720, apple-m3, laptop-igpu): tokens/s PROJECTED "
                                                 "for their GPUs from acceptance measured here."),
    uag: bool = typer.Option(False, "--uag", help="Also run transformers on the same GGUF files (float32): plain "
                             "greedy and universal assisted generation with each model drafter, as rows hf:*."),
    budget: Optional[str] = typer.Option(None, "--memory-budget", "-b", help="With --device-profile: the memory the "
                                         "app may use on the device (default: the profile's), planned for."),
    draft_min: int = typer.Option(0, "--draft-min", min=0, help="Verify at least this many draft tokens a step, "
                                  "paying or not (llama.cpp's --draft-min): compares drafters' acceptance where "
                                  "adaptive drafting would decline."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="0 is greedy. Above 0 every row samples "
                                      "(plain llama.cpp too) and model drafters sample their drafts."),
    seed: int = typer.Option(0, "--seed", help="With --temperature: each prompt's sampling seed."),
) -> None:
    """Plain llama.cpp, its prompt lookup and edgespec's drafters, side by side in one run.

    Example: edgespec bench -m qwen2.5-coder-1.5b --drafters lookup,auto --peers llama-server -n 256 --json bench.json
    (edgespec bench --markdown bench.json then prints its table;
    add --onnx FOLDER to run an `edgespec export` of the model on ONNX Runtime beside llama.cpp;
    --backend fpga-sim prices every call on a simulated KV260 FPGA instead of timing this CPU;
    --device cpu,gpu measures llama.cpp's Vulkan GPU beside the CPU;
    --device-profile adreno-750,apple-m3 projects phone and laptop GPUs)
    """
    from .bench import load_prompts, print_rows, run_bench
    from .bench_record import record

    if markdown is not None:
        from .bench_record import markdown as tables

        print(tables(json.loads(markdown.read_text())), end="")
        return
    names = [d.strip() for d in drafters.split(",") if d.strip()]
    if temperature > 0 and (device_profile or backend != "cpu" or uag):
        _fail("--temperature is measured on the CPU rows only (not with --device-profile, --backend fpga-sim or --uag)")
    if budget and not device_profile:
        # every method of a measured bench runs in this one process: no budget can hold for each
        _fail("bench takes --memory-budget with --device-profile only; to measure a budget here use "
              "`edgespec profile MODEL --memory-budget SIZE` (or --sweep)")
    if device_profile:
        from .simulated import print_projection, run_projection

        rows = run_projection(model, load_prompts(prompts, limit), names, max_tokens, ctx, threads, max_draft,
                              [p.strip() for p in device_profile.split(",") if p.strip()], err, budget)
        print_projection(rows, out)
        if json_path:
            json_path.write_text(json.dumps(record(rows, model), indent=2))
        return
    if backend == "fpga-sim":
        from .fpga_bench import print_fpga_rows, run_fpga_bench

        rows = run_fpga_bench(model, load_prompts(prompts, limit), names, max_tokens, ctx, threads, max_draft, err)
        print_fpga_rows(rows, out)
        if json_path:
            json_path.write_text(json.dumps(record(rows, model), indent=2))
        return
    if backend != "cpu":
        raise EdgespecError(f"unknown --backend {backend!r}: cpu or fpga-sim")
    from .runtimes.devices import DEVICES

    devices = [d.strip() for d in device.split(",") if d.strip()]
    bad = [d for d in devices if d not in DEVICES]
    if bad or not devices or devices[0] != "cpu" and len(devices) > 1:
        _fail(f"--device takes cpu, or cpu followed by others (cpu,gpu): got {device!r}")
    rows = run_bench(model, load_prompts(prompts, limit), names, max_tokens, ctx, threads, max_draft, peer, err,
                     onnx=onnx, devices=devices, uag=uag, draft_min=draft_min,
                     params=SamplingParams(temperature=temperature, seed=seed),
                     peers=[p.strip() for p in peers.split(",") if p.strip()])
    print_rows(rows, out)
    if json_path:
        json_path.write_text(json.dumps(record(rows, model), indent=2))
        err.print(f"[dim]wrote {json_path}[/]")


@app.command()
@user_errors
def profile(
    model: str = typer.Argument(DEFAULT_MODEL, help="Model-store name or .gguf file."),
    drafter: str = DrafterOpt,
    memory_budget: Optional[str] = BudgetOpt,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="JSONL workload (default: the bench prompts)."),
    category: Optional[str] = typer.Option("code", "--category", help="Only prompts of this category ('' for all)."),
    limit: Optional[int] = typer.Option(2, "--limit", help="Prompts per category."),
    max_tokens: int = typer.Option(128, "--max-tokens", "-n", min=1),
    sweep_budgets: bool = typer.Option(False, "--sweep", help="Also run under a range of budgets, from plain "
                                       "decoding's footprint up, each in a fresh process: speed-up against budget."),
    budgets: Optional[str] = typer.Option(None, "--budgets", help="Comma-separated budgets for --sweep "
                                          "(default: plain decoding's footprint x 1.0, 1.05, 1.1, 1.25, 1.5)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
    plot_path: Optional[Path] = typer.Option(None, "--plot", help="Plot memory over time (and the sweep) to a PNG."),
    ctx: int = CtxOpt,
    threads: Optional[int] = ThreadsOpt,
    max_draft: int = MaxDraftOpt,
    device: str = DeviceOpt,
    quiet: bool = typer.Option(False, "--quiet", hidden=True),
) -> None:
    """Run a workload with memory sampled over time; print predicted against measured memory.

    Example: edgespec profile qwen2.5-coder-1.5b --memory-budget 1.5GB --sweep --plot memory.png
    """
    from .bench import load_prompts
    from .profile import plot, print_profile, print_sweep, run_profile, sweep

    rows = [p for p in load_prompts(prompts, limit) if not category or p["category"] == category]
    if not rows:
        _fail(f"no prompts of category {category!r}")
    console = err if quiet else out
    r = run_profile(model, drafter, memory_budget, ctx, threads, max_draft, max_tokens, rows, device)
    result: dict = {"run": r}
    if not quiet:
        print_profile(r, console)
    if sweep_budgets:
        from .footprint import ModelFacts, fmt_bytes, process_rss
        from .planner import plain_footprint
        from .runtimes import model_file
        from .store import resolve

        base = plain_footprint(ModelFacts.from_gguf(model_file(resolve(model))), ctx, process_rss()["rss"])
        out.print(f"plain decoding's footprint at context {ctx}: {fmt_bytes(base)} (f16 KV cache, weights read "
                  "once, micro-batch 64)", highlight=False)
        if budgets:
            levels: list = [b.strip() for b in budgets.split(",") if b.strip()]
        else:
            levels = [f"{int(base * f)}" for f in (1.0, 1.05, 1.1, 1.25, 1.5)]
        result["sweep"] = sweep(model, drafter, [None, *levels], ctx, threads, max_draft, max_tokens, prompts,
                                limit, err, category, device)
        print_sweep(result["sweep"], out, base)
    if json_path:
        json_path.write_text(json.dumps(result if sweep_budgets else r))
    if plot_path:
        plot(plot_path, r, result.get("sweep"))
        console.print(f"[dim]wrote {plot_path}[/]")


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
    from .apps.server import Limits, LocalServer
    from .store import MODELS

    if model not in MODELS and not allow_path:
        _fail(f"{model!r} is not in the model store ({', '.join(MODELS)}); to serve a file from elsewhere, "
              "start with --allow-path")
    if host not in ("127.0.0.1", "localhost", "::1") and api_key is None:
        err.print(f"[yellow]warning:[/] listening on {host} without --api-key: anyone who reaches this port can "
                  "use the model", highlight=False)
    llm = _load(model, drafter, ctx, threads, max_draft, memory_budget, device, ep_option)
    model_id = model if model in MODELS else Path(model).name
    limits = Limits(max_body_bytes=max_body, max_tokens=max_tokens_limit, max_queue=max_queue, timeout_s=timeout)

    def ready(url: str) -> None:
        print(f"edgespec serve: {url} (model {model_id}, drafter {llm.drafter_name}); Ctrl-C stops", flush=True)

    try:
        LocalServer(llm, model_id, host, port, limits, api_key, cors_origin or None,
                    set(allowed_host)).run(on_ready=ready)
    finally:
        llm.close()


@app.command()
@user_errors
def export(
    source: str = typer.Argument(..., help="Hugging Face checkpoint folder, .gguf file, or model-store name."),
    to: str = typer.Option(..., "--to", help="onnx, gguf, or ternary (packed TLMM weights for the fpga-sim backend)."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder to create for the exported model."),
    quant: Optional[str] = typer.Option(
        None, "--quant", "-q", help="onnx: fp32 (default), int8 (= int8-dynamic), int8-weight-only, int4 (= int4-b32), int4-b128 (int8 compute), int4-f32, int4-b128-f32 (float32 compute: cheaper batches); gguf: f16 (default), q8_0, q4_k_m, tq2_0, tq1_0 (llama.cpp's ternary types); ternary: b1.58."),
    trim_vocab: Optional[int] = typer.Option(None, "--trim-vocab", help="VocabTrim: keep the K most used tokens in the LM head."),
    calib: list[Path] = typer.Option([], "--calib", help="Text file(s) whose tokens the target uses (default: its own generations)."),
    validate: bool = typer.Option(True, "--validate/--no-validate", help="Compare with the source on a fixed text."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output folder."),
    threads: Optional[int] = ThreadsOpt,
    json_out: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Export a model to ONNX, GGUF or ternary, quantized, optionally with a trimmed vocabulary.

    Example: edgespec export smollm2-135m --to onnx -q int4 -o smollm2-int4
    (--to ternary writes BitNet b1.58 weights packed for table-lookup matmul: the fpga-sim backend runs it)
    """
    from .export.pipeline import ExportPlan, run_export

    plan = ExportPlan(source, to, output, quant, trim_vocab, calib, force, threads, validate)
    try:
        manifest = run_export(plan, quiet=json_out)
    except ImportError as e:
        if _caused_by_interrupt(e):
            raise  # Ctrl-C while a native module loaded: user_errors says "interrupted"
        if e.name is None:  # a module is there but failed to load: not a missing extra
            _fail(f"export could not load a module it needs: {str(e).splitlines()[0]}")
        _fail(f"export needs the export extras ({e.name} is missing): pip install 'edgespec[export]'")
    if json_out:
        out.print_json(json.dumps(manifest))
        return
    v = manifest.get("validation") or {}
    out.print(f"wrote {output}: {manifest['format']} {manifest['quantization']}, "
              f"{manifest['size_bytes'] / 1e6:.0f} MB, {manifest['parameters'] / 1e6:.0f}M parameters")
    if v:
        out.print(f"vs source on {v['tokens']} tokens: top-1 agreement {v['top1_agreement']:.1%}, "
                  f"max |Δlogit| {v['max_abs_dlogit']:.3f}, perplexity {v['perplexity_export']:.2f} "
                  f"(source {v['perplexity_source']:.2f}, x{v['perplexity_ratio']:.3f})"
                  + (f"; decodes one token in {v['decode_ms']:.1f} ms" if v.get("decode_ms") else ""))


@app.command()
@user_errors
def doctor(json_out: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """The backends, devices and execution providers on this machine, and where each --device runs.

    Example: edgespec doctor --json
    """
    from .doctor import diagnose, print_report

    report = diagnose()
    if json_out:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, out)


@models_app.command("list")
@user_errors
def models_list(json_out: bool = typer.Option(False, "--json")) -> None:
    """The models edgespec can fetch, and which are cached.

    Example: edgespec models list --json
    """
    from .store import MODELS, cached_path, is_cached

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
    from .store import fetch, spec

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
    from .store import resolve

    print(resolve(name))


@models_app.command("verify")
@user_errors
def models_verify(name: str) -> None:
    """Re-hash a cached model against its pinned sha256.

    Example: edgespec models verify qwen2.5-coder-1.5b
    """
    from .store import verify

    out.print(f"{name}: ok ({verify(name)})", highlight=False)


def version_callback(value: bool) -> None:
    if value:
        from . import __version__

        print(f"edgespec {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True, help="Show the version."),
) -> None:
    pass


def main() -> None:
    app()
