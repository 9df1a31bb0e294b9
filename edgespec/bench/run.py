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

import os
from collections import defaultdict
from importlib.util import find_spec
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from rich.console import Console
from rich.table import Table

from edgespec.api import EdgeSpec
from edgespec.bench import forced as forced_rows, llama_server
from edgespec.bench.common import LCP, Run, encode_prompt, output_format, print_wide
from edgespec.bench.curves import BatchCurves
from edgespec.bench.hf_assisted import hf_methods
from edgespec.bench.hybrid_compare import INTERVAL, against_best_member, against_best_peer, against_plain, verdict
from edgespec.bench.llama_server import NAME, decode_timing
from edgespec.bench.oracle import lookup_oracle_time
from edgespec.bench.replay import priced, replay
from edgespec.bench.structured import gbnf
from edgespec.bench.worker import MethodSpec, Worker
from edgespec.drafters import PLAIN as NO_DRAFTER, DrafterSpec, check_drafter
from edgespec.errors import EdgespecError
from edgespec.models.export_check import read_manifest
from edgespec.models.store import model_file, resolve
from edgespec.runtimes import open_backend
from edgespec.runtimes.llamacpp import small_batch_kernels
from edgespec.speculative import calibration
from edgespec.speculative.cpu_load import OtherLoad, contends
from edgespec.speculative.verifier import SamplingParams

PLAIN = "plain"
PEER = "llama-cpp-python-lookup"
LLAMA_SERVER, HF = "llama-server", "hf"
PEERS = (LCP, LLAMA_SERVER, HF)  # what --peers names: llama-cpp-python's own Llama, llama.cpp's server, transformers


class _Peer:
    """A llama-server configuration (llama_server.py) as a bench method."""

    def __init__(self, server, is_eog: Callable[[int], bool]) -> None:
        self.server, self.is_eog = server, is_eog

    def run(self, ids: list[int], max_tokens: int, fmt: dict | None = None) -> Run:
        answer = self.server.complete(ids, max_tokens, gbnf(fmt) if fmt else None)
        toks, seconds, drafted, accepted = decode_timing(answer, self.is_eog)
        return Run(toks, seconds, drafted, accepted)


def _start_servers(model_path: Path, draft_models: dict[str, Path], ctx: int, threads: int, flash_attn: bool,
                   is_eog: Callable[[int], bool], servers: list, console: Console) -> dict[str, Callable]:
    """One llama-server per configuration, appended to `servers` as it starts (the caller
    stops them), as bench methods by row name; flash attention as edgespec's backend has it."""

    exe = llama_server.binary()
    if exe is None:
        raise EdgespecError("--peers llama-server: no llama-server is built on this machine "
                            "(./install.sh --dev builds it; or set EDGESPEC_LLAMA_SERVER to one)")
    methods: dict[str, Callable] = {}
    for name, spec in llama_server.configurations(draft_models).items():
        with console.status(f"starting {name}…"):
            server = llama_server.LlamaServer(exe, model_path, ctx, threads, spec, flash_attn, label=name)
        servers.append(server)
        methods[name] = _Peer(server, is_eog).run
    return methods


def _plain_of(name: str, methods: dict) -> str:
    """The row a method is compared with: its own runtime's or device's plain row
    (gpu:plain for gpu:lookup, onnx:plain for onnx:auto), else llama.cpp's plain.
    A peer's speculation compares with the peer's own plain (another context or process),
    and that with plain: it runs the same kernels, so a text of its own would make its
    types' ratios a comparison of texts."""
    if name.startswith(NAME + ":"):
        return NAME
    if name == PEER:
        return LCP
    own = f"{name.split(':')[0]}:plain"
    return own if ":" in name and own in methods else PLAIN


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


def run_bench(*args, **kwargs) -> list[dict]:
    """`_run_bench`, with every process it started (llama-servers, the methods' own)
    stopped however it ends (Ctrl-C too)."""
    servers: list = []
    workers: list[Worker] = []
    try:
        return _run_bench(*args, servers=servers, workers=workers, **kwargs)
    finally:
        for child in [*servers, *workers]:
            child.close()


def _run_bench(
    model: str, prompts: list[dict], drafters: list[str], max_tokens: int, ctx: int,
    threads: int | None, max_draft: int, console: Console, onnx: str | None = None,
    devices: list[str] | None = None, draft_min: int = 0, params: SamplingParams = SamplingParams(),
    peers: Sequence[str] = (LCP,), servers: list | None = None, workers: list | None = None,
    forced: Sequence[int] = (),
) -> list[dict]:
    """`onnx`: ONNX exports of the same model, comma-separated; their rows (`onnx:plain`,
    `onnx:<drafter>`; `onnx-int4:plain`, ... for several) run the same prompts on ONNX
    Runtime, side by side with llama.cpp's. `devices`
    beyond the first (the CPU): the same model on llama.cpp's GPU, rows `gpu:plain`,
    `gpu:<drafter>` (plain there is edgespec's engine without a drafter). `draft_min`: edgespec's
    drafters verify at least that many tokens a step (DraftController.min_k). `params`: every
    row decodes with these (sampling: outputs are not compared with plain's, and model
    drafters sample their drafts). `peers` (PEERS): "llama-cpp-python" adds that library's own
    generation, plain and with its prompt lookup; "llama-server" llama.cpp's server, plain and
    with each of its speculation types (and each same-vocabulary model drafter as `-md`),
    rows `llama-server`, `llama-server:ngram-mod`, ... compared with llama-server's plain;
    "hf" transformers' plain greedy and its universal assisted generation with each model
    drafter (hf_assisted.py), rows `hf:plain` and `hf:uag:<drafter>`. `forced`: draft lengths
    each drafter runs at instead of adaptively (forced.py), rows `forced<k>:<drafter>`."""
    from edgespec.runtimes.llamacpp import default_threads, init_backend

    drafter_paths = _checked(drafters, peers, params)
    if forced and peers:
        raise EdgespecError("--forced measures edgespec's drafters alone: add --peers none")
    formats = [output_format(p) for p in prompts]
    if any(formats) and HF in peers:
        raise EdgespecError("--peers hf cannot hold answers to a schema or tools: leave it out for structured prompts")
    peer = LCP in peers
    models = {_label(s.model): s.name for s in map(DrafterSpec.parse, drafters) if s.uses_model}  # label: drafter
    threads = threads or default_threads()
    path = resolve(model)
    servers = servers if servers is not None else []
    others = [d for d in (devices or ["cpu"]) if d != "cpu"]
    init_backend(others[0] if others else "cpu")  # before anything starts llama.cpp's devices
    seed = calibration.load_kinds(path, [])  # what each method's controller starts from
    stores = calibration.kept_for(path, threads)  # a new machine's: nothing
    setup = _Setup(drafters, ctx, threads, max_draft, draft_min, params, workers if workers is not None else [],
                   list(forced))
    n_methods = 1 + len(drafters) * max(1, len(forced)) + 2 * peer
    with console.status(f"loading {model} for {n_methods} methods, each in a process of its own…"):
        host, es, methods = setup.on_cpu(path, model, peer, onnx)
    if LLAMA_SERVER in peers:
        same_vocab = {label: model_file(drafter_paths[d]) for label, d in models.items()
                      if es[_label(d)].info["drafter_vocab"] == host.tokenizer.n_vocab}
        methods.update(_start_servers(model_file(path), same_vocab, ctx, threads, host.backend.flash_attn,
                                      host.tokenizer.is_eog, servers, console))
    if HF in peers:
        methods.update(_hf_rows(prompts, host, models, drafter_paths, path, threads, console))
    encoded = _encoded(prompts, host, max_tokens, ctx)
    warm = encoded[0][1][:32]
    for run in methods.values():  # page in weights, allocate buffers
        run(warm, 8)
    # GPU methods load after the CPU's are timed: a software GPU (lavapipe) compiles its
    # shaders on the CPU, in threads that would run through the CPU's calibration
    for dev in others:
        methods.update(setup.on_device(path, dev, warm, console))
    # the peers' and the methods' processes are the bench's own work, not other programs' load
    load = OtherLoad(own=tuple(s.proc.pid for s in servers) + tuple(w.pid for w in setup.workers))
    timed_curves = BatchCurves(setup.plain_engines(), kernels_off=small_batch_kernels())
    runs, identical = _interleave(methods, encoded, formats, max_tokens, params, console, timed_curves.time)
    other_cores = _report_load(load, threads, console)
    cats = list(dict.fromkeys(c for c, _ in encoded))
    curves = timed_curves.print(console)
    # the oracle and the replays copy plain's text without a grammar: not for structured prompts
    costs = priced(host, curves[""]) if PLAIN in methods and not any(formats) else None
    oracle = _oracle_times(encoded, runs, costs, cats, console) if costs is not None else {}
    replayed = _replays(drafters, encoded, runs, host, seed, max_draft, draft_min, costs) \
        if costs is not None and params.greedy and not forced else {}
    rows = _rows(methods, runs, identical, cats, oracle, replayed)
    _annotate(rows, runs, methods, cats, other_cores, costs, curves, len(timed_curves.timings), servers)
    forced_rows.annotate(rows, runs, curves.get(""))
    off = timed_curves.medians_off()
    for r in rows:
        r["stores_at_start"] = stores
        if off and r["drafter"] == PLAIN and r["category"] == "all":
            r["batch_costs_kernels_off_ms"] = [round(1000 * off[n], 3) for n in sorted(off)]
    return rows


class _Setup:
    """Starts each method of each runtime and device in a process of its own; remembers each
    one's plain method, on which the batch-cost curves are timed."""

    def __init__(self, drafters: list[str], ctx: int, threads: int, max_draft: int, draft_min: int,
                 params: SamplingParams, workers: list[Worker], forced: list[int]) -> None:
        self.drafters, self.ctx, self.threads, self.forced = drafters, ctx, threads, forced
        self.max_draft, self.draft_min, self.params = max_draft, draft_min, params
        self.workers = workers  # every method's process, in the order started (the caller stops them)
        self.plains: dict[str, Worker] = {}  # each runtime's and device's plain method, by the prefix of its rows

    def plain_engines(self) -> dict[str, Worker]:
        """Each runtime's and device's plain method, by the prefix of its rows ("" for llama.cpp's on the CPU)."""
        return self.plains

    def _start(self, label: str, spec: MethodSpec) -> Worker:
        worker = Worker(label, spec)
        self.workers.append(worker)
        return worker

    def _engines(self, model: Path, prefix: str = "", device: str = "cpu") -> dict[str, Worker]:
        """Plain decoding (key "plain") and each drafter, keyed by its row's label (`_label`;
        forced, `forced<k>:<label>`), on `model`, each in a process of its own."""
        engines = {PLAIN: self._start(prefix + PLAIN, self._spec(model, NO_DRAFTER, device))}
        for d in self.drafters:
            for k in self.forced:
                name = forced_rows.label(_label(d), k)
                engines[name] = self._start(prefix + name, self._spec(model, d, device, max_draft=k, draft_min=k))
            if not self.forced:
                engines[_label(d)] = self._start(prefix + _label(d), self._spec(model, d, device))
        self.plains[prefix] = engines[PLAIN]
        return engines

    def _spec(self, model: Path, drafter: str, device: str, **lengths: int) -> MethodSpec:
        lengths = {"max_draft": self.max_draft, "draft_min": self.draft_min, **lengths}
        return MethodSpec(str(model), drafter, self.ctx, self.threads, device=device, params=self.params, **lengths)

    def on_cpu(self, path: Path, model: str, peer: bool,
               onnx: str | None) -> tuple[EdgeSpec, dict[str, Worker], dict[str, Callable]]:
        """The methods on the CPU: llama.cpp's plain and drafter rows, llama-cpp-python's with
        `peer`, each ONNX export's. Also returns the model opened here for its tokenizer and
        template (it decodes nothing), and the drafters' processes by label."""
        host = EdgeSpec(open_backend(path, n_ctx=self.ctx, threads=self.threads), drafter=NO_DRAFTER, n_ctx=self.ctx,
                        max_draft=self.max_draft, idle_timing=False)
        es = self._engines(path)
        methods: dict[str, Callable] = {PLAIN: es.pop(PLAIN).run}
        if peer:
            tok = host.tokenizer
            eog = tuple(t for t in range(tok.n_vocab) if tok.is_eog(t))
            for name, lookup in ((LCP, False), (PEER, True)):
                spec = MethodSpec(str(path), ctx=self.ctx, threads=self.threads, params=self.params,
                                  llama_cpp_python=True, lookup=lookup, eog=eog)
                methods[name] = self._start(name, spec).run
        methods.update({name: m.run for name, m in es.items()})
        for prefix, export in _onnx_prefixes(onnx).items():
            on_export = self._engines(export, f"{prefix}:")  # refuses a trimmed one
            if self.plains[f"{prefix}:"].info["n_vocab"] != host.tokenizer.n_vocab:
                raise EdgespecError(f"{export} has another vocabulary than {model}: export the same model")
            methods.update({f"{prefix}:{name}": o.run for name, o in on_export.items()})
        return host, es, methods

    def on_device(self, path: Path, dev: str, warm: list[int], console: Console) -> dict[str, Callable]:
        """The model on llama.cpp's `dev`: rows `dev:plain`, `dev:<drafter>`, warmed."""
        with console.status(f"loading {path.name} on --device {dev}…"):
            rows = {f"{dev}:{name}": g for name, g in self._engines(path, f"{dev}:", dev).items()}
            info = rows[f"{dev}:{PLAIN}"].info
            if info["device"] == "CPU":  # a CPU fallback would only repeat the CPU's rows
                raise EdgespecError(f"--device {dev}: {info['notice']}")
            console.print(f"{dev}: {info['device']}" + (f" ({info['notice']})" if info["notice"] else ""),
                          highlight=False)
        for g in rows.values():
            g.run(warm, 8)
        return {name: g.run for name, g in rows.items()}


def _checked(drafters: list[str], peers: Sequence[str], params: SamplingParams) -> dict[str, Path | None]:
    """Each drafter's model path (None for a model-free one); arguments the bench cannot run are refused
    before anything loads."""
    if NO_DRAFTER in drafters:
        raise EdgespecError("plain decoding is always in the bench; 'none' is not a drafter")
    drafter_paths = {d: check_drafter(d) for d in drafters}
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise EdgespecError(f"unknown peer {unknown[0]!r}: the bench knows {', '.join(PEERS)}")
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
             path: Path, threads: int, console: Console) -> dict[str, Callable]:
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
    return {name: m.run for name, m in hf.items()}


def _encoded(prompts: list[dict], tmpl: EdgeSpec, max_tokens: int, ctx: int) -> list[tuple[str, list[int]]]:
    """(category, prompt ids) of every prompt, each refused if its answer would not fit."""
    encoded = [(p["category"], encode_prompt(p, tmpl)) for p in prompts]
    too_long = [len(ids) for _, ids in encoded if len(ids) + max_tokens > ctx]
    if too_long:
        raise EdgespecError(f"a prompt of {too_long[0]} tokens plus {max_tokens} new ones exceeds --ctx {ctx}")
    return encoded


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of n methods (Williams' design) in which, over all of them, every method runs
    in every position equally often and right after every other method equally often: a
    method that always ran right after another would inherit that one's effect on the
    cores and caches, which a mere rotation keeps. For n = 4: 0132, 1203, 2310, 3021 (each
    of the 12 ordered pairs once); an odd n needs these n orders and their reverses."""
    first = [0] + [(j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n)]  # 0, 1, n-1, 2, n-2, ...
    orders = [[(m + i) % n for m in first] for i in range(n)]
    return orders if n % 2 == 0 else orders + [o[::-1] for o in orders]


def _interleave(methods: dict[str, Callable], encoded: list[tuple[str, list[int]]], formats: list[dict | None],
                max_tokens: int, params: SamplingParams, console: Console,
                after_category: Callable[[], None]) -> tuple[dict, dict]:
    """Every method on every prompt (held to its format, if any), prompt by prompt, and
    `after_category` after each category's last prompt. Returns the runs by (method, category),
    in prompt order, and for greedy decoding how many of them wrote their plain row's text."""
    from rich.progress import Progress

    runs: dict[tuple[str, str], list[Run]] = defaultdict(list)
    identical: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])  # (method, category) -> [same, runs]
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("bench", total=len(encoded) * len(methods))
        names = list(methods)
        orders = balanced_orders(len(names))
        last = {cat: i for i, (cat, _) in enumerate(encoded)}
        for i, (cat, ids) in enumerate(encoded):
            now: dict[str, Run] = {}
            for name in (names[j] for j in orders[i % len(orders)]):
                bar.update(task, description=f"{cat}: {name}")
                now[name] = methods[name](ids, max_tokens, formats[i])
                bar.advance(task)
            for name in names:  # each device's rows compare with its own plain run (gpu:plain for gpu:*)
                runs[(name, cat)].append(now[name])
                ref = _plain_of(name, methods)
                if name != ref and params.greedy:  # sampled outputs differ run to run
                    for c in (cat, "all"):
                        identical[(name, c)][0] += now[name].tokens == now[ref].tokens
                        identical[(name, c)][1] += 1
            if i == last[cat]:
                bar.update(task, description=f"{cat}: timing batch costs")
                after_category()
    return runs, identical


def _oracle_times(encoded: list[tuple[str, list[int]]], runs: dict, costs: Sequence[float], cats: list[str],
                  console: Console) -> dict[str, list[float]]:
    """[plain, oracle] seconds per category (and "all"), each prompt's plain output replayed
    once at `costs`."""
    oracle: dict[str, list[float]] = {}
    for cat in cats:
        ids_of = [ids for c, ids in encoded if c == cat]  # runs[(PLAIN, cat)] is in this order
        t = oracle.setdefault(cat, [0.0, 0.0])
        for ids, r in zip(ids_of, runs[(PLAIN, cat)]):
            t[0] += max(len(r.tokens) - 1, 0) * costs[1]
            t[1] += lookup_oracle_time(ids, r.tokens, costs)
    oracle["all"] = [sum(t[0] for t in oracle.values()), sum(t[1] for t in oracle.values())]
    console.print("oracle and replay rows priced at these batch costs", highlight=False)
    return oracle


class _Totals(NamedTuple):
    """One method's runs in one category, summed."""

    tokens: int  # after each run's first, whose time is the prefill's
    seconds: float
    drafted: int
    accepted: int
    overhead_ms: float  # per token
    by_position: list  # [tried, accepted] per draft position
    steps: int
    drafter_step_ms: float | None
    by_key: dict  # kind -> [drafted, accepted]
    forced: int = 0  # tokens a grammar forced
    grammar_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def _totals(runs: dict, name: str, cat: str) -> _Totals:
    rs = [r for (n, c), lst in runs.items() for r in lst if n == name and (cat == "all" or c == cat)]
    pos: list[list[int]] = []
    for r in rs:
        for i, (t, a) in enumerate(r.position):
            while len(pos) <= i:
                pos.append([0, 0])
            pos[i][0] += t
            pos[i][1] += a
    keys: dict[str, list[int]] = {}
    for r in rs:
        for k, (dr, ac) in r.by_key.items():
            keys.setdefault(k, [0, 0])
            keys[k][0] += dr
            keys[k][1] += ac
    dsteps = sum(r.drafter_steps for r in rs)
    return _Totals(
        tokens=sum(len(r.tokens) - 1 for r in rs), seconds=sum(r.decode_s for r in rs),
        drafted=sum(r.drafted for r in rs), accepted=sum(r.accepted for r in rs),
        overhead_ms=sum(r.overhead_ms * len(r.tokens) for r in rs) / max(1, sum(len(r.tokens) for r in rs)),
        by_position=pos, steps=sum(r.steps for r in rs),
        drafter_step_ms=1000 * sum(r.draft_s for r in rs) / dsteps if dsteps else None, by_key=keys,
        forced=sum(r.forced for r in rs), grammar_s=sum(r.grammar_s for r in rs))


def _rows(methods: dict, runs: dict, identical: dict, cats: list[str], oracle: dict, replayed: dict) -> list[dict]:
    """A row per method and category (then "all"), with the oracle's and each replay's."""
    rows = []
    for cat in cats + ["all"]:
        plain = _totals(runs, PLAIN, cat)
        for name in methods:
            ref = _plain_of(name, methods)
            base = _totals(runs, ref, cat) if ref not in (PLAIN, name) else plain
            rows.append(_row(name, cat, _totals(runs, name, cat), base.tokens_per_s, identical))
        if cat in oracle:
            rows.append(_oracle_row(cat, plain.tokens_per_s, *oracle[cat], plain.tokens))
        for d, totals in replayed.items():
            rows.append(_replay_row(d, cat, plain.tokens_per_s, *totals[cat], plain.tokens))
    return rows


def _row(name: str, cat: str, t: _Totals, base_tps: float, identical: dict) -> dict:
    measured_overhead = name not in (LCP, PEER) and not name.startswith(("hf:", "llama-server"))
    return {
        "drafter": name,
        "category": cat,
        "tokens_per_s": round(t.tokens_per_s, 3),
        "acceptance_rate": round(t.accepted / t.drafted, 4) if t.drafted else None,
        "ratio_to_plain": round(t.tokens_per_s / base_tps, 3) if base_tps else None,
        "overhead_ms_per_token": round(t.overhead_ms, 4) if measured_overhead else None,
        "tokens": t.tokens,
        "mean_accepted": round((t.steps + t.accepted) / t.steps, 3) if t.steps else None,
        "acceptance_by_position": [round(a / n, 3) if n else None for n, a in t.by_position][:8],
        "identical_to_plain": ("{}/{}".format(*identical[(name, cat)]) if (name, cat) in identical else None),
        "drafter_step_ms": round(t.drafter_step_ms, 3) if t.drafter_step_ms is not None else None,
        # which kind of draft the accepted tokens came from (the hybrid mixes them)
        "by_drafter": {k: {"drafted": dr, "accepted": ac} for k, (dr, ac) in sorted(t.by_key.items())},
        **_grammar_cells(t),
    }


def _grammar_cells(t: _Totals) -> dict:
    """Under a grammar: the tokens it forced, and its time per token verified (every batch's
    rows: one a step, the drafted and the forced ones)."""
    if not t.grammar_s:
        return {}
    verified = t.steps + t.drafted + t.forced
    return {"forced_tokens": t.forced, "grammar_ms_per_verified_token": round(1000 * t.grammar_s / verified, 4)}


def _annotate(rows: list[dict], runs: dict, methods: dict, cats: list[str], other_cores: float | None,
              costs: Sequence[float] | None, curves: dict, timings: int, servers: list) -> None:
    """What a row is compared with beyond its plain: the best peer, the prompts' spread, the
    best member of a hybrid; the batch costs a replay was priced at, and each runtime's curve (the
    median of `timings`); how a peer ran."""
    def plain_of(name: str) -> str:
        return _plain_of(name, methods)

    compared = against_best_member(runs, cats)
    spread = against_plain(runs, cats, plain_of)
    mine = [n for n in methods if _measured_edgespec(n) and plain_of(n) != n]
    peers = against_best_peer(runs, cats, plain_of, mine, [n for n in methods if n.startswith(NAME + ":")])
    server_commands = {s.label: s.command for s in servers}
    for r in rows:
        if r["category"] == "all" and r["drafter"] in server_commands:
            r["server_command"] = server_commands[r["drafter"]]
        if (r["drafter"], r["category"]) in spread:
            r["x_plain_interval"] = spread[(r["drafter"], r["category"])]
        r["other_cores"] = other_cores
        if r["category"] in compared.get(r["drafter"], {}):
            r["against_best_member"] = compared[r["drafter"]][r["category"]]
        if (r["drafter"], r["category"]) in peers:
            r["against_best_peer"] = peers[(r["drafter"], r["category"])]
            r["x_best_peer"] = r["against_best_peer"]["ratio"]
        if r["drafter"] == ORACLE or r["drafter"].startswith(REPLAY):
            r["batch_costs_ms"] = [round(1000 * float(c), 3) for c in costs[1:]]  # batch sizes 1, 2, ...
        curve = curves.get(r["drafter"].removesuffix("plain")) if r["category"] == "all" else None
        if curve and r["drafter"].endswith("plain"):
            r["batch_costs_ms"] = [round(1000 * curve[n], 3) for n in sorted(curve)]
            r["batch_cost_timings"] = timings


def _measured_edgespec(name: str) -> bool:
    """An edgespec method that ran (not a peer, a replay or the oracle, which are priced)."""
    return name not in (PLAIN, LCP, PEER) and not name.startswith((NAME, "hf:", ORACLE, REPLAY))


def _report_load(load: OtherLoad, threads: int, console: Console) -> float | None:
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


REPLAY = "replay:"


def _replays(drafters: list[str], encoded: list[tuple[str, list[int]]], runs: dict, host: EdgeSpec, seed: dict,
             max_draft: int, draft_min: int, costs: Sequence[float]) -> dict[str, dict[str, list[float]]]:
    """Each text-only drafter replayed on plain's outputs (replay.py) at `costs`, the curve
    the oracle is priced at, from `seed`, the acceptance the real runs' controllers started
    from: the same text for every method, so the ratio is the method's alone."""
    plain = {cat: iter(runs[(PLAIN, cat)]) for cat in dict.fromkeys(c for c, _ in encoded)}
    recorded = [(cat, ids, next(plain[cat]).tokens) for cat, ids in encoded]  # runs[...] is in prompt order
    return {d: replay(host.tokenizer, recorded, d, costs, max_draft, seed, draft_min)
            for d in drafters if DrafterSpec.parse(d).text_only}


def _replay_row(drafter: str, cat: str, plain_tps: float, plain_time: float, replay_time: float, drafted: int,
                accepted: int, tokens: int) -> dict:
    return _replayed_row(REPLAY + drafter, cat, plain_tps, plain_time, replay_time, tokens,
                         round(accepted / drafted, 4) if drafted else None,
                         "plain's output replayed by the real engine and controller at the measured batch costs")


ORACLE = "oracle:lookup"


def _oracle_row(cat: str, plain_tps: float, plain_time: float, oracle_time: float, tokens: int) -> dict:
    """What prompt lookup would reach with a controller that knows how many tokens
    each proposal gets accepted, on this run's own plain output and batch costs."""
    return _replayed_row(ORACLE, cat, plain_tps, plain_time, oracle_time, tokens, None,
                         "upper bound: plain output replayed with perfect knowledge of acceptance")


def _replayed_row(name: str, cat: str, plain_tps: float, plain_time: float, seconds: float, tokens: int,
                  acceptance: float | None, note: str) -> dict:
    """A row priced, not timed: plain's output replayed at the run's batch costs."""
    ratio = plain_time / seconds if seconds else None
    return {"drafter": name, "category": cat,
            "tokens_per_s": round(plain_tps * ratio, 3) if ratio else 0.0, "acceptance_rate": acceptance,
            "ratio_to_plain": round(ratio, 3) if ratio else None, "overhead_ms_per_token": None,
            "tokens": tokens, "mean_accepted": None, "acceptance_by_position": [],
            "identical_to_plain": None, "drafter_step_ms": None, "by_drafter": {}, "note": note}


def print_rows(rows: list[dict], console: Console) -> None:
    peers = any("x_best_peer" in r for r in rows)
    t = Table("category", "method", "tok/s", "x plain", f"{INTERVAL:.0%} over prompts", *(["x best peer"] if peers else []),
              "accept", "by position",
              "overhead ms/tok", "same as plain", "drafter ms/step", "accepted from",
              title="edgespec bench (decode speed, prefill excluded; measured side by side in one run)")
    for r in rows:
        t.add_row(
            r["category"], r["drafter"], f"{r['tokens_per_s']:.2f}",
            f"{r['ratio_to_plain']:.2f}" if r["ratio_to_plain"] is not None else "-",
            "{:.2f}-{:.2f}".format(*r["x_plain_interval"]) if "x_plain_interval" in r else "-",
            *([f"{r['x_best_peer']:.2f}" if "x_best_peer" in r else "-"] if peers else []),
            f"{r['acceptance_rate']:.0%}" if r["acceptance_rate"] is not None else "-",
            "/".join("-" if a is None else f"{100 * a:.0f}" for a in r["acceptance_by_position"][:4]) or "-",
            f"{r['overhead_ms_per_token']:.3f}" if r["overhead_ms_per_token"] is not None else "-",
            r["identical_to_plain"] or "-",
            f"{r['drafter_step_ms']:.1f}" if r.get("drafter_step_ms") is not None else "-",
            " ".join(f"{k} {v['accepted']}" for k, v in r.get("by_drafter", {}).items() if v["accepted"]) or "-",
        )
    print_wide(console, t, 160)
    print_hybrids(rows, console)
    print_against_peers(rows, console)
    print_fastest(rows, console)
    print_grammar(rows, console)
    forced_rows.print_forced(rows, console)


def print_grammar(rows: list[dict], console: Console) -> None:
    """Under a grammar, one line per method: tokens forced, and the grammar's ms per verified token."""
    for r in rows:
        if r["category"] == "all" and "grammar_ms_per_verified_token" in r:
            console.print(f"grammar, {r['drafter']}: {r['forced_tokens']} tokens forced, "
                          f"{r['grammar_ms_per_verified_token']:.3f} ms per verified token (masks, forced "
                          "tokens, draft checks)", highlight=False)


def print_fastest(rows: list[dict], console: Console) -> None:
    """Where the run holds more than one runtime or device (ONNX exports, a GPU), which of
    them decodes each category fastest end to end, drafting included: a representation
    with dear single steps but cheap batches can win where drafts are long."""
    names = {r["drafter"] for r in rows}
    others = sorted({n.split(":")[0] for n in names if n.endswith(":plain")} - {"hf"})
    if not others:
        return
    for cat in dict.fromkeys(r["category"] for r in rows):
        best: dict[str, dict] = {}
        for r in rows:
            prefix = r["drafter"].split(":")[0]
            # a name with a colon and no plain row of its own is a peer, a replay or a bound
            group = prefix if prefix in others else None if ":" in r["drafter"] else "llama.cpp"
            if r["category"] == cat and group and r["tokens_per_s"] > best.get(group, {}).get("tokens_per_s", 0):
                best[group] = r
        ranked = sorted(best.values(), key=lambda r: -r["tokens_per_s"])
        console.print(f"{cat}: {ranked[0]['drafter']} decodes fastest end to end ({ranked[0]['tokens_per_s']:.2f} tok/s; "
                      "the best of each other runtime: " + ", ".join(f"{r['drafter']} {r['tokens_per_s']:.2f}"
                                                                  for r in ranked[1:]) + ")", highlight=False)


def print_against_peers(rows: list[dict], console: Console) -> None:
    """Each edgespec method's speed-up against the best llama-server type's, with the
    precision this run allows (hybrid_compare.against_best_peer)."""
    compared = [r for r in rows if "against_best_peer" in r]
    if not compared:
        return
    t = Table("category", "method", "best type", "its x plain", "x best peer", f"{INTERVAL:.0%} interval", "prompts",
              "measured", title="speed-up against the best llama-server --spec-type's, each over its own plain "
              "(paired by prompt, resampled)")
    peer_ratio = {(r["drafter"], r["category"]): r["ratio_to_plain"] for r in rows}
    for r in compared:
        c = r["against_best_peer"]
        t.add_row(r["category"], r["drafter"], c["best_peer"].removeprefix(NAME + ":"),
                  f"{peer_ratio[(c['best_peer'], r['category'])]:.3f}", *_measured_cells(c))
    print_wide(console, t, 120)


def print_hybrids(rows: list[dict], console: Console) -> None:
    """Each hybrid against the best single drafter it mixes, with the precision this run allows."""
    compared = [r for r in rows if "against_best_member" in r]
    if not compared:
        return
    t = Table("category", "hybrid", "best member", "x best member", f"{INTERVAL:.0%} interval", "prompts", "measured",
              title="hybrids against the best single drafter they mix (paired by prompt, resampled)")
    for r in compared:
        c = r["against_best_member"]
        t.add_row(r["category"], r["drafter"], c["best_member"], *_measured_cells(c))
    print_wide(console, t, 120)


def _measured_cells(c: dict) -> list[str]:
    """A paired comparison's ratio, its interval, its prompts and what it shows."""
    return [f"{c['ratio']:.3f}", "{:.3f}-{:.3f}".format(*c["interval"]), str(c["prompts"]), verdict(c)]
