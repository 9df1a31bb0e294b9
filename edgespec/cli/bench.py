"""edgespec bench: plain decoding, edgespec's drafters and peers, side by side in one run."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import typer

from edgespec.bench.common import LCP
from edgespec.cli.common import CtxOpt, MaxDraftOpt, ModelOpt, ThreadsOpt, app, err, fail, out, user_errors
from edgespec.errors import EdgespecError


@app.command()
@user_errors
def bench(
    model: str = ModelOpt,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="JSONL: {category, prompt} or {category, messages}; "
                                           "or a shipped set: shipped (the default), heldout, all, structured "
                                           "(rows with a response_format or tools)."),
    drafters: str = typer.Option("lookup,ngram,recycle,auto", "--drafters", help="Comma-separated edgespec drafters."),
    max_tokens: int = typer.Option(256, "--max-tokens", "-n", min=1),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the run here: its rows, the machine "
                                             "and the command (what the docs' tables are generated from)."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Print the tables of a run written by --json "
                                            "as markdown, and run nothing."),
    ctx: int = CtxOpt,
    threads: Optional[int] = ThreadsOpt,
    max_draft: int = MaxDraftOpt,
    peers: str = typer.Option(LCP, "--peers", help="Comma-separated peers to run beside edgespec, or none: "
                              "llama-cpp-python (its own generation, plain and with its prompt lookup), "
                              "llama-server (llama.cpp's server, built by ./install.sh --dev, plain and with each of "
                              "its speculation types: rows llama-server:*), hf (transformers, plain greedy and its "
                              "universal assisted generation with each model drafter: rows hf:*)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Use only the first N prompts of each category."),
    category: Optional[str] = typer.Option(None, "--category", help="Comma-separated categories: use only their "
                                           "prompts, e.g. chat."),
    onnx: Optional[str] = typer.Option(None, "--onnx", help="ONNX exports of the same model, comma-separated: also run them on "
                                      "ONNX Runtime (rows onnx:*, or onnx-QUANT:* for several)."),
    backend: str = typer.Option("cpu", "--backend", help="cpu (measured here) or fpga-sim (acceptance measured here, "
                                "tokens/s and energy simulated for TeLLMe v2's design on a KV260)."),
    device: str = typer.Option("cpu", "--device", help="Comma-separated devices to measure side by side, e.g. "
                               "cpu,gpu: rows of other devices are named gpu:plain, gpu:lookup, ..."),
    device_profile: Optional[str] = typer.Option(None, "--device-profile", help="Comma-separated device profiles "
                                                 "(adreno-750, mali-g720, apple-m3, laptop-igpu): tokens/s PROJECTED "
                                                 "for their GPUs from acceptance measured here."),
    budget: Optional[str] = typer.Option(None, "--memory-budget", "-b", help="With --device-profile: the memory the "
                                         "app may use on the device (default: the profile's), planned for."),
    draft_min: int = typer.Option(0, "--draft-min", min=0, help="Verify at least this many draft tokens a step, "
                                  "paying or not (llama.cpp's --draft-min): compares drafters' acceptance where "
                                  "adaptive drafting would decline."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="0 is greedy. Above 0 every row samples "
                                      "(plain llama.cpp too) and model drafters sample their drafts."),
    seed: int = typer.Option(0, "--seed", help="With --temperature: each prompt's sampling seed."),
    forced: Optional[str] = typer.Option(None, "--forced", help="Comma-separated draft lengths, e.g. 1,2,4: each "
                                         "drafter runs at each length every step instead of adaptively, paying or "
                                         "not (rows forced<k>:<drafter>), with its cost and the speed-up it would "
                                         "give at this run's batch costs. Measurements, not what auto does."),
    fresh: bool = typer.Option(False, "--fresh", help="Start every method from empty stores, as on a new machine: "
                               "no batch-cost curve, no learned acceptance (a temporary store; yours is not touched)."),
) -> None:
    """Plain llama.cpp, its prompt lookup and edgespec's drafters, side by side in one run.

    Example: edgespec bench -m qwen2.5-coder-1.5b --drafters lookup,auto --peers llama-server --fresh --json bench.json
    (edgespec bench --markdown bench.json then prints its table;
    add --onnx FOLDER[,FOLDER] to run `edgespec export`s of the model on ONNX Runtime beside llama.cpp;
    --backend fpga-sim prices every call on a simulated KV260 FPGA instead of timing this CPU;
    --device cpu,gpu measures llama.cpp's Vulkan GPU beside the CPU;
    --device-profile adreno-750,apple-m3 projects phone and laptop GPUs)
    """
    from edgespec.bench.common import load_prompts
    from edgespec.bench.forced import parse_lengths
    from edgespec.bench.fpga import print_fpga_rows, run_fpga_bench
    from edgespec.bench.record import markdown as tables, record
    from edgespec.bench.rows import print_rows
    from edgespec.bench.run import BenchConfig, run_bench
    from edgespec.bench.simulated import print_projection, run_projection
    from edgespec.runtimes.gpu.devices import DEVICES
    from edgespec.speculative import calibration
    from edgespec.speculative.verifier import SamplingParams

    if markdown is not None:
        print(tables(json.loads(markdown.read_text())), end="")
        return
    names = [d.strip() for d in drafters.split(",") if d.strip()]
    categories = [c.strip() for c in (category or "").split(",") if c.strip()]
    peer_names = [p.strip() for p in peers.split(",") if p.strip() and p.strip() != "none"]
    if temperature > 0 and (device_profile or backend != "cpu"):
        fail("--temperature is measured on the CPU rows only (not with --device-profile or --backend fpga-sim)")
    if budget and not device_profile:
        # every method of a measured bench runs in this one process: no budget can hold for each
        fail("bench takes --memory-budget with --device-profile only; to measure a budget here use "
              "`edgespec profile MODEL --memory-budget SIZE` (or --sweep)")
    if device_profile:
        rows = run_projection(model, load_prompts(prompts, limit, categories), names, max_tokens, ctx, threads, max_draft,
                              [p.strip() for p in device_profile.split(",") if p.strip()], err, budget)
        print_projection(rows, out)
        if json_path:
            json_path.write_text(json.dumps(record(rows, model), indent=2))
        return
    if backend == "fpga-sim":
        rows = run_fpga_bench(model, load_prompts(prompts, limit, categories), names, max_tokens, ctx, threads, max_draft, err)
        print_fpga_rows(rows, out)
        if json_path:
            json_path.write_text(json.dumps(record(rows, model), indent=2))
        return
    if backend != "cpu":
        raise EdgespecError(f"unknown --backend {backend!r}: cpu or fpga-sim")

    devices = [d.strip() for d in device.split(",") if d.strip()]
    bad = [d for d in devices if d not in DEVICES]
    if bad or not devices or devices[0] != "cpu" and len(devices) > 1:
        fail(f"--device takes cpu, or cpu followed by others (cpu,gpu): got {device!r}")
    with calibration.temporary_store() if fresh else nullcontext():
        cfg = BenchConfig(model, load_prompts(prompts, limit, categories), names, max_tokens, ctx, threads, max_draft,
                          onnx=onnx, devices=devices, draft_min=draft_min,
                          params=SamplingParams(temperature=temperature, seed=seed), peers=peer_names,
                          forced=parse_lengths(forced))
        rows = run_bench(cfg, err)
    print_rows(rows, out)
    if json_path:
        json_path.write_text(json.dumps(record(rows, model), indent=2))
        err.print(f"[dim]wrote {json_path}[/]")
