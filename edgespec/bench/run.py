"""`edgespec bench`: plain llama.cpp, edgespec's drafters and peers, side by side on the
same prompts in one run, interleaved prompt by prompt in balanced orders, so machine
noise falls on all of them alike.

Every timed method runs as a user runs it: in a process of its own (worker.py), plain
decoding too. A peer is compared with its own plain row (llama-cpp-python's lookup with
llama-cpp-python, llama-server's speculation with llama-server).

Every method is timed the same way: a stream, clocked from its first token to its
last, so prefill is excluded everywhere and tokens/s is decoding speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib.util import find_spec
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console

from edgespec.api import EdgeSpec
from edgespec.bench import llama_server, rows as bench_rows
from edgespec.bench.common import LCP, Run, encode_prompt, output_format, report_load
from edgespec.bench.curves import BatchCurves
from edgespec.bench.hf_assisted import hf_methods
from edgespec.bench.interleave import interleave
from edgespec.bench.llama_server import NAME, decode_timing
from edgespec.bench.methods import LCP_LOOKUP, PLAIN, Method, edgespec_method, lcp_methods, peer_method
from edgespec.bench.oracle import oracle_times
from edgespec.bench.replay import priced, replay
from edgespec.bench.structured import server_fields, waits_for_a_call
from edgespec.bench.worker import MethodSpec, Worker
from edgespec.drafters import PLAIN as NO_DRAFTER, DrafterSpec, check_drafter
from edgespec.errors import EdgespecError
from edgespec.models.export_check import read_manifest
from edgespec.models.store import model_file, resolve
from edgespec.runtimes import open_backend
from edgespec.runtimes.llamacpp import small_batch_kernels
from edgespec.speculative import calibration
from edgespec.speculative.cpu_load import OtherLoad
from edgespec.speculative.verifier import SamplingParams

LLAMA_SERVER, HF = NAME, "hf"
HF_PLAIN = HF + ":" + PLAIN
PEERS = (LCP, LLAMA_SERVER, HF)  # what --peers names: llama-cpp-python's own Llama, llama.cpp's server, transformers


@dataclass
class BenchConfig:
    """What `edgespec bench` runs. `onnx`: ONNX exports of the same model, comma-separated;
    their rows (`onnx:plain`, `onnx:<drafter>`; `onnx-int4:plain`, ... for several) run the
    same prompts on ONNX Runtime. `devices` beyond the first (the CPU): the same model on
    llama.cpp's GPU, rows `gpu:plain`, `gpu:<drafter>`. `draft_min`: edgespec's drafters verify
    at least that many tokens a step (DraftController.min_k). `params`: every row decodes with
    these (sampling: outputs are not compared with plain's, and model drafters sample their
    drafts). `peers` (PEERS): "llama-cpp-python" adds that library's own generation, plain and
    with its prompt lookup; "llama-server" llama.cpp's server, plain and with each of its
    speculation types (and each same-vocabulary model drafter as `-md`), compared with
    llama-server's plain; "hf" transformers' plain greedy and its universal assisted generation
    with each model drafter (hf_assisted.py), rows `hf:plain` and `hf:uag:<drafter>`. `forced`:
    draft lengths each drafter runs at instead of adaptively (forced.py), rows `forced<k>:<drafter>`."""

    model: str
    prompts: list[dict]
    drafters: list[str]
    max_tokens: int
    ctx: int
    threads: int | None
    max_draft: int
    onnx: str | None = None
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    draft_min: int = 0
    params: SamplingParams = field(default_factory=SamplingParams)
    peers: Sequence[str] = (LCP,)
    forced: Sequence[int] = ()


class _Peer:
    """A llama-server configuration (llama_server.py) as a bench method."""

    def __init__(self, server, is_eog: Callable[[int], bool]) -> None:
        self.server, self.is_eog = server, is_eog

    def run(self, ids: list[int], max_tokens: int, fmt: dict | None = None) -> Run:
        answer = self.server.complete(ids, max_tokens, server_fields(fmt))
        toks, seconds, drafted, accepted = decode_timing(answer, self.is_eog)
        return Run(toks, seconds, drafted, accepted)


def _start_servers(model_path: Path, draft_models: dict[str, Path], cfg: BenchConfig, threads: int, flash_attn: bool,
                   is_eog: Callable[[int], bool], servers: list, console: Console) -> dict[str, Method]:
    """One llama-server per configuration, appended to `servers` as it starts (the caller
    stops them), as bench methods by row name; flash attention as edgespec's backend has it."""
    exe = llama_server.binary()
    if exe is None:
        raise EdgespecError("--peers llama-server: no llama-server is built on this machine "
                            "(./install.sh --dev builds it; or set EDGESPEC_LLAMA_SERVER to one)")
    methods: dict[str, Method] = {}
    for name, spec in llama_server.configurations(draft_models).items():
        with console.status(f"starting {name}…"):
            server = llama_server.LlamaServer(exe, model_path, cfg.ctx, threads, spec, flash_attn, label=name)
        servers.append(server)
        methods[name] = peer_method(name, PLAIN if name == NAME else NAME, _Peer(server, is_eog).run, NAME)
    return methods


def _onnx_prefixes(onnx: str | None) -> dict[str, Path]:
    """Comma-separated ONNX exports of the model, by the prefix of their rows: `onnx` for
    one, else `onnx-QUANT` (`onnx-int4:auto`, `onnx-int4-f32:auto`) from each manifest,
    or the folder's name where two share a quantization."""
    exports = [resolve(e.strip()) for e in (onnx or "").split(",") if e.strip()]
    if len(exports) == 1:
        return {"onnx": exports[0]}
    quants = [(read_manifest(e if e.is_dir() else e.parent) or {}).get("quantization") for e in exports]
    unique = len(set(quants)) == len(quants) and all(quants)
    return {f"onnx-{q if unique else e.name}": e for q, e in zip(quants, exports)}


def _label(drafter: str) -> str:
    """A model drafter given as a path shows as its folder or file name (a hybrid's too:
    the hybrid and its model are two rows)."""
    return DrafterSpec.parse(drafter).label


def run_bench(cfg: BenchConfig, console: Console) -> list[dict]:
    """The bench's rows as records (rows.Row.as_record), with every process it started
    (llama-servers, the methods' own) stopped however it ends (Ctrl-C too)."""
    servers: list = []
    workers: list[Worker] = []
    try:
        return [r.as_record() for r in _run(cfg, console, servers, workers)]
    finally:
        for child in [*servers, *workers]:
            child.close()


def _run(cfg: BenchConfig, console: Console, servers: list, workers: list[Worker]) -> list[bench_rows.Row]:
    from edgespec.runtimes.llamacpp import default_threads, init_backend

    drafter_paths = _checked(cfg)
    formats = [output_format(p) for p in cfg.prompts]
    if any(formats) and HF in cfg.peers:
        raise EdgespecError("--peers hf cannot hold answers to a schema or tools: leave it out for structured prompts")
    if any(map(waits_for_a_call, formats)) and LCP in cfg.peers:
        raise EdgespecError(f"--peers {LCP} cannot wait for a tool call to open (tool_choice auto needs a lazy "
                            "grammar): use --peers llama-server or none for these prompts")
    threads = cfg.threads or default_threads()
    path = resolve(cfg.model)
    others = [d for d in cfg.devices if d != "cpu"]
    init_backend(others[0] if others else "cpu")  # before anything starts llama.cpp's devices
    seed = calibration.load_kinds(path, [])  # what each method's controller starts from
    stores = calibration.kept_for(path, threads)  # a new machine's: nothing
    setup = _Setup(cfg, threads, workers)
    host, methods = setup.on_cpu(path, console)
    methods.update(_peer_methods(cfg, host, setup, drafter_paths, path, threads, servers, console))
    encoded = _encoded(cfg.prompts, host, cfg.max_tokens, cfg.ctx)
    warm = encoded[0][1][:32]
    for m in methods.values():  # page in weights, allocate buffers
        m.run(warm, 8)
    # GPU methods load after the CPU's are timed: a software GPU (lavapipe) compiles its
    # shaders on the CPU, in threads that would run through the CPU's calibration
    for dev in others:
        methods.update(setup.on_device(path, dev, warm, console))
    # the peers' and the methods' processes are the bench's own work, not other programs' load
    load = OtherLoad(own=tuple(s.proc.pid for s in servers) + tuple(w.pid for w in workers))
    timed_curves = BatchCurves(setup.plains, kernels_off=small_batch_kernels())
    runs, identical = interleave(methods, encoded, formats, cfg.max_tokens, cfg.params, console, timed_curves.time)
    other_cores = report_load(load, threads, console)
    cats = list(dict.fromkeys(c for c, _ in encoded))
    curves = timed_curves.print(console)
    # the oracle and the replays copy plain's text without a grammar: not for structured prompts
    costs = priced(host, curves[""]) if not any(formats) else None
    oracle = {}
    if costs is not None:
        oracle = oracle_times(encoded, {cat: runs[(PLAIN, cat)] for cat in cats}, costs)
        console.print("oracle and replay rows priced at these batch costs", highlight=False)
    replayed = _replays(cfg, encoded, runs, host, seed, costs) \
        if costs is not None and cfg.params.greedy and not cfg.forced else {}
    rows = bench_rows.build(methods, runs, identical, cats, oracle, replayed)
    bench_rows.annotate(rows, runs, methods, cats, other_cores, costs, curves, len(timed_curves.timings),
                        {s.label: s.command for s in servers})
    off = timed_curves.medians_off()
    for r in rows:
        r.stores_at_start = stores
        if off and r.method.name == PLAIN and r.category == "all":
            r.batch_costs_kernels_off_ms = [round(1000 * off[n], 3) for n in sorted(off)]
    return rows


def _peer_methods(cfg: BenchConfig, host: EdgeSpec, setup: _Setup, drafter_paths: dict, path: Path, threads: int,
                  servers: list, console: Console) -> dict[str, Method]:
    """llama-server's rows and transformers' (`cfg.peers`; llama-cpp-python's start with the CPU's)."""
    models = {_label(s.model): s.name for s in map(DrafterSpec.parse, cfg.drafters) if s.uses_model}  # label: drafter
    methods: dict[str, Method] = {}
    if LLAMA_SERVER in cfg.peers:
        same_vocab = {label: model_file(drafter_paths[d]) for label, d in models.items()
                      if setup.workers_by_name[_label(d)].info["drafter_vocab"] == host.tokenizer.n_vocab}
        methods.update(_start_servers(model_file(path), same_vocab, cfg, threads, host.backend.flash_attn,
                                      host.tokenizer.is_eog, servers, console))
    if HF in cfg.peers:
        methods.update(_hf_rows(cfg.prompts, host, models, drafter_paths, path, threads, console))
    return methods


class _Setup:
    """Starts each method of each runtime and device in a process of its own; remembers each
    one's plain method, on which the batch-cost curves are timed."""

    def __init__(self, cfg: BenchConfig, threads: int, workers: list[Worker]) -> None:
        self.cfg, self.threads = cfg, threads
        self.workers = workers  # every method's process, in the order started (the caller stops them)
        self.workers_by_name: dict[str, Worker] = {}
        self.plains: dict[str, Worker] = {}  # each runtime's and device's plain method, by the prefix of its rows

    def _start(self, label: str, spec: MethodSpec) -> Worker:
        worker = Worker(label, spec)
        self.workers.append(worker)
        self.workers_by_name[label] = worker
        return worker

    def _engines(self, model: Path, prefix: str = "", device: str = "cpu") -> dict[str, Method]:
        """Plain decoding and each drafter (forced: at each of cfg.forced) on `model`, by row
        name, each in a process of its own."""
        cfg = self.cfg
        plain = self._start(prefix + PLAIN, self._spec(model, NO_DRAFTER, device))
        self.plains[prefix] = plain
        out = [edgespec_method(PLAIN, plain.run, prefix)]
        for d in cfg.drafters:
            for k in cfg.forced or [0]:
                lengths = {"max_draft": k, "draft_min": k} if k else {}
                m = edgespec_method(_label(d), None, prefix, k)
                worker = self._start(m.name, self._spec(model, d, device, **lengths))
                out.append(replace(m, run=worker.run))
        return {m.name: m for m in out}

    def _spec(self, model: Path, drafter: str, device: str, **lengths: int) -> MethodSpec:
        cfg = self.cfg
        lengths = {"max_draft": cfg.max_draft, "draft_min": cfg.draft_min, **lengths}
        return MethodSpec(str(model), drafter, cfg.ctx, self.threads, device=device, params=cfg.params, **lengths)

    def on_cpu(self, path: Path, console: Console) -> tuple[EdgeSpec, dict[str, Method]]:
        """The methods on the CPU: llama.cpp's plain and drafter rows, llama-cpp-python's when
        a peer, each ONNX export's. Also returns the model opened here for its tokenizer and
        template (it decodes nothing)."""
        cfg = self.cfg
        n_methods = 1 + len(cfg.drafters) * max(1, len(cfg.forced)) + 2 * (LCP in cfg.peers)
        with console.status(f"loading {cfg.model} for {n_methods} methods, each in a process of its own…"):
            host = EdgeSpec(open_backend(path, n_ctx=cfg.ctx, threads=self.threads), drafter=NO_DRAFTER,
                            n_ctx=cfg.ctx, max_draft=cfg.max_draft, idle_timing=False)
            own = self._engines(path)
            methods = {PLAIN: own.pop(PLAIN)}
            if LCP in cfg.peers:
                methods.update({m.name: m for m in lcp_methods(*self._llama_cpp_python(path, host))})
            methods.update(own)
            for prefix, export in _onnx_prefixes(cfg.onnx).items():
                on_export = self._engines(export, f"{prefix}:")  # refuses a trimmed one
                if self.plains[f"{prefix}:"].info["n_vocab"] != host.tokenizer.n_vocab:
                    raise EdgespecError(f"{export} has another vocabulary than {cfg.model}: export the same model")
                methods.update(on_export)
        return host, methods

    def _llama_cpp_python(self, path: Path, host: EdgeSpec) -> list[Callable]:
        """llama-cpp-python's own generation, plain and with its prompt lookup, each in a process."""
        tok = host.tokenizer
        eog = tuple(t for t in range(tok.n_vocab) if tok.is_eog(t))
        return [self._start(name, MethodSpec(str(path), ctx=self.cfg.ctx, threads=self.threads, params=self.cfg.params,
                                             llama_cpp_python=True, lookup=lookup, eog=eog)).run
                for name, lookup in ((LCP, False), (LCP_LOOKUP, True))]

    def on_device(self, path: Path, dev: str, warm: list[int], console: Console) -> dict[str, Method]:
        """The model on llama.cpp's `dev`: rows `dev:plain`, `dev:<drafter>`, warmed."""
        with console.status(f"loading {path.name} on --device {dev}…"):
            rows = self._engines(path, f"{dev}:", dev)
            info = self.plains[f"{dev}:"].info
            if info["device"] == "CPU":  # a CPU fallback would only repeat the CPU's rows
                raise EdgespecError(f"--device {dev}: {info['notice']}")
            console.print(f"{dev}: {info['device']}" + (f" ({info['notice']})" if info["notice"] else ""),
                          highlight=False)
        for m in rows.values():
            m.run(warm, 8)
        return rows


def _checked(cfg: BenchConfig) -> dict[str, Path | None]:
    """Each drafter's model path (None for a model-free one); arguments the bench cannot run are refused
    before anything loads."""
    drafters, peers, params = cfg.drafters, cfg.peers, cfg.params
    if NO_DRAFTER in drafters:
        raise EdgespecError("plain decoding is always in the bench; 'none' is not a drafter")
    drafter_paths = {d: check_drafter(d) for d in drafters}
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise EdgespecError(f"unknown peer {unknown[0]!r}: the bench knows {', '.join(PEERS)}")
    if cfg.forced and peers:
        raise EdgespecError("--forced measures edgespec's drafters alone: add --peers none")
    if (LLAMA_SERVER in peers or HF in peers) and not params.greedy:
        raise EdgespecError("--peers llama-server and hf run greedy decoding only (no --temperature)")
    if HF in peers:
        if not any(DrafterSpec.parse(d).uses_model for d in drafters):
            raise EdgespecError("--peers hf runs transformers' assisted generation with a model drafter: "
                                "name one in --drafters")
        missing = [m for m in ("torch", "transformers") if find_spec(m) is None]
        if missing:
            raise EdgespecError(f"--peers hf needs the export extras ({missing[0]} is missing): "
                                "pip install 'edgespec[export]'")
    return drafter_paths


def _hf_rows(prompts: list[dict], tmpl: EdgeSpec, models: dict[str, str], drafter_paths: dict,
             path: Path, threads: int, console: Console) -> dict[str, Method]:
    """transformers' plain greedy and its assisted generation with each model drafter."""
    with console.status("loading the models in transformers (dequantized to float32)…"):
        eog_ids = [t for t in range(tmpl.tokenizer.n_vocab) if tmpl.tokenizer.is_eog(t)]
        texts = [t for p in prompts for t in ([p["prompt"]] if "prompt" in p else [m["content"] for m in p["messages"]])]
        # each drafter model's llama.cpp tokenizer, opened here (its engine row runs in a process of its own)
        on_hf = [(label, model_file(drafter_paths[d]),
                  open_backend(drafter_paths[d], n_ctx=512, threads=threads).tokenizer)
                 for label, d in models.items()]
        hf, notices = hf_methods(model_file(path), tmpl.tokenizer, on_hf, eog_ids, threads, texts)
    for n in notices:
        console.print(f"[yellow]{n}[/]", highlight=False, soft_wrap=True)
    return {name: peer_method(name, HF_PLAIN, m.run, HF) for name, m in hf.items()}


def _encoded(prompts: list[dict], tmpl: EdgeSpec, max_tokens: int, ctx: int) -> list[tuple[str, list[int]]]:
    """(category, prompt ids) of every prompt, each refused if its answer would not fit."""
    encoded = [(p["category"], encode_prompt(p, tmpl)) for p in prompts]
    too_long = [len(ids) for _, ids in encoded if len(ids) + max_tokens > ctx]
    if too_long:
        raise EdgespecError(f"a prompt of {too_long[0]} tokens plus {max_tokens} new ones exceeds --ctx {ctx}")
    return encoded


def _replays(cfg: BenchConfig, encoded: list[tuple[str, list[int]]], runs: dict, host: EdgeSpec, seed: dict,
             costs: Sequence[float]) -> dict[str, dict[str, list[float]]]:
    """Each text-only drafter replayed on plain's outputs (replay.py) at `costs`, the curve
    the oracle is priced at, from `seed`, the acceptance the real runs' controllers started
    from: the same text for every method, so the ratio is the method's alone."""
    plain = {cat: iter(runs[(PLAIN, cat)]) for cat in dict.fromkeys(c for c, _ in encoded)}
    recorded = [(cat, ids, next(plain[cat]).tokens) for cat, ids in encoded]  # runs[...] is in prompt order
    return {d: replay(host.tokenizer, recorded, d, costs, cfg.max_draft, seed, cfg.draft_min)
            for d in cfg.drafters if DrafterSpec.parse(d).text_only}
