"""Each bench method in a process of its own, as a user runs it.

A method that shares its process with others shares what they leave behind: their
llama.cpp contexts and repacked weights, their Python objects for the collector to walk,
their threads. Timed so, the same drafts ran measurably slower than in a process of their
own (docs/design.md, "The bench's processes"), and a user runs one engine. So every timed method (plain
decoding, each drafter, llama-cpp-python's own generation) loads the model in a child
process of its own and decodes there when the bench asks; the bench keeps only a
tokenizer's use of the model, and clocks nothing itself.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from edgespec.bench.common import Run, timed
from edgespec.drafters import PLAIN
from edgespec.errors import EdgespecError
from edgespec.runtimes.llamacpp import llama_cpp_kernels_only
from edgespec.speculative.drafter import drafter_backends, model_costs
from edgespec.speculative.verifier import SamplingParams


@dataclass(frozen=True)
class MethodSpec:
    """What a method's process loads: edgespec's engine with `drafter` ("none": plain) on
    `model` (a GGUF, or an ONNX export) on `device`, or llama-cpp-python's own generation
    (`llama_cpp_python`, with its prompt lookup if `lookup`)."""

    model: str
    drafter: str = PLAIN
    ctx: int = 4096
    threads: int = 2
    max_draft: int = 16
    draft_min: int = 0
    device: str = "cpu"
    params: SamplingParams = field(default_factory=SamplingParams)
    llama_cpp_python: bool = False
    lookup: bool = False
    eog: tuple[int, ...] = ()  # llama-cpp-python's end-of-generation ids (edgespec's tokenizer knows its own)


class EdgespecMethod:
    """edgespec's engine with one drafter ("none": plain decoding)."""

    def __init__(self, spec: MethodSpec) -> None:
        from edgespec.api import EdgeSpec
        from edgespec.runtimes import open_backend

        backend = open_backend(Path(spec.model), n_ctx=spec.ctx, threads=spec.threads, device=spec.device)
        # nothing timed at idle: the bench never idles, and a batch timed while another method decodes would slow it
        self.llm = EdgeSpec(backend, drafter=spec.drafter, n_ctx=spec.ctx, threads=spec.threads,
                            max_draft=spec.max_draft, device=spec.device, idle_timing=False)
        self.llm.engine.controller.min_k = spec.draft_min
        self.params = spec.params
        self._grammars: dict[str, Any] = {}

    def info(self) -> dict[str, Any]:
        b = self.llm.backend
        drafters = drafter_backends(self.llm.drafter)
        return {"n_vocab": b.tokenizer.n_vocab, "device": b.device, "notice": b.notice,
                "drafter_vocab": drafters[0].tokenizer.n_vocab if drafters else None}

    def run(self, ids: list[int], max_tokens: int, fmt: dict | None = None) -> Run:
        """One answer to `ids`, held to `fmt` (common.output_format) if given."""
        self.llm.reset()
        models = model_costs(self.llm.drafter)
        before = (sum(c.steps for c in models), sum(c.step_s for c in models))
        constraint = self._grammar(fmt).constraint(self.llm.tokenizer) if fmt else None
        toks, dt = timed(self.llm.engine.generate(ids, max_tokens, self.params, constraint=constraint))
        st = self.llm.last_stats
        after = (sum(c.steps for c in models), sum(c.step_s for c in models))
        return Run(toks, dt, st.drafted, st.accepted, st.overhead_ms_per_token, st.steps,
                   list(zip(st.position_tried, st.position_accepted)), after[0] - before[0],
                   after[1] - before[1], {k: list(v) for k, v in st.by_key.items()}, st.forced_tokens, st.grammar_s,
                   st.drafter_model_s)

    def _grammar(self, fmt: dict):
        """The compiled grammar of `fmt`, once per format: compiling is a request's, not decoding's."""
        from edgespec.structured.tools import Tools

        key = json.dumps(fmt, sort_keys=True)
        if key not in self._grammars:
            tools = Tools(**fmt) if "tools" in fmt else None
            self._grammars[key] = self.llm.grammar(response_format=fmt.get("response_format"), tools=tools)
        return self._grammars[key]

    def time_curve(self, small_batch: bool = True) -> dict[int, float]:
        """Every batch size timed now, from an empty context (seconds by size); with
        `small_batch` False, on llama.cpp's own kernels for small batches. Only a plain
        engine's: a drafter's would lose the curve it learned."""
        self.llm.reset()
        with nullcontext() if small_batch else llama_cpp_kernels_only():
            return self.llm.engine.calibrate(fresh=True, save=False)


class LlamaCppPythonMethod:
    """llama-cpp-python's own high-level generation, as its users run it."""

    def __init__(self, spec: MethodSpec) -> None:
        from llama_cpp import LLAMA_DEFAULT_SEED, Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        seed = spec.params.seed
        self.llm = Llama(
            spec.model, n_ctx=spec.ctx, n_threads=spec.threads, n_threads_batch=spec.threads, n_batch=512,
            draft_model=LlamaPromptLookupDecoding() if spec.lookup else None, verbose=False,
            # with a draft model Llama keeps logits for every position but sizes that
            # buffer by n_batch unless logits_all is given: past 512 tokens it crashes
            logits_all=spec.lookup, seed=LLAMA_DEFAULT_SEED if seed is None else seed,
        )
        self.eog = frozenset(spec.eog)
        self.params = spec.params

    def info(self) -> dict[str, Any]:
        return {"n_vocab": self.llm.n_vocab(), "device": "CPU", "notice": None, "drafter_vocab": None}

    def run(self, ids: list[int], max_tokens: int, fmt: dict | None = None) -> Run:
        """One answer, held to `fmt` by llama.cpp's own grammar sampling (GBNF) if given."""
        from llama_cpp import LlamaGrammar

        from edgespec.bench.structured import gbnf

        self.llm.reset()  # no prompt cache across runs: each run pays its own prefill
        text = gbnf(fmt) if fmt else None
        grammar = LlamaGrammar.from_string(text, verbose=False) if text is not None else None
        toks, dt = timed(self._tokens(ids, max_tokens, grammar))
        return Run(toks, dt)

    def _tokens(self, ids: list[int], max_tokens: int, grammar) -> Iterator[int]:
        p = self.params  # plain sampling, as edgespec's (no min-p, no repeat penalty)
        n = 0
        for t in self.llm.generate(ids, temp=p.temperature, top_k=1 if p.greedy else p.top_k, top_p=p.top_p,
                                   min_p=0.0, repeat_penalty=1.0, reset=True, grammar=grammar):
            if t in self.eog:
                return
            yield t
            n += 1
            if n >= max_tokens:
                return

    def time_curve(self, small_batch: bool = True) -> dict[int, float]:
        raise EdgespecError("llama-cpp-python's rows have no batch-cost curve of edgespec's")


def _serve(spec: MethodSpec, conn) -> None:
    """The method's process: load, say what loaded, then run what the bench asks until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the bench's to handle: it stops this process
    try:
        method = (LlamaCppPythonMethod if spec.llama_cpp_python else EdgespecMethod)(spec)
        conn.send(("ok", method.info()))
    except Exception as e:  # noqa: BLE001 - a load's failure goes to the bench as its one-line error
        conn.send(("error", str(e) or type(e).__name__))
        return
    calls: dict[str, Callable] = {"run": method.run, "time_curve": method.time_curve}
    while True:
        try:
            op, args = conn.recv()
        except EOFError:  # the bench is gone
            return
        if op == "stop":
            return
        try:
            conn.send(("ok", calls[op](*args)))
        except Exception as e:  # noqa: BLE001
            conn.send(("error", str(e) or type(e).__name__))


class Worker:
    """A method's process, seen from the bench: `run` and `time_curve` as the method's own,
    `info` what it loaded (vocabulary sizes, device), `pid` for the bench's load reading."""

    def __init__(self, label: str, spec: MethodSpec) -> None:
        self.label = label
        mp = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of the bench's in it
        self._conn, child = mp.Pipe()
        self._proc = mp.Process(target=_serve, args=(spec, child), name=f"edgespec-bench {label}", daemon=True)
        self._proc.start()
        child.close()
        self.pid = self._proc.pid
        self.info: dict[str, Any] = self._reply()

    def run(self, ids: list[int], max_tokens: int, fmt: dict | None = None) -> Run:
        return self._call("run", list(ids), max_tokens, fmt)

    def time_curve(self, small_batch: bool = True) -> dict[int, float]:
        return self._call("time_curve", small_batch)

    def _call(self, op: str, *args: Any) -> Any:
        try:
            self._conn.send((op, args))
        except OSError:
            self._reply()  # it ended: say how
        return self._reply()

    def _reply(self) -> Any:
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(5)
            raise EdgespecError(f"the bench's {self.label} process {_ended(self._proc.exitcode)}") from None
        if status == "error":
            raise EdgespecError(f"{self.label}: {value}")
        return value

    def close(self) -> None:
        try:
            self._conn.send(("stop", ()))
        except OSError:
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)
        self._conn.close()


def _ended(exitcode: int | None) -> str:
    """How a method's process ended, for the bench's one-line error. Killed outright, it was
    most likely the kernel's out-of-memory killer: every method holds the model in a process
    of its own."""
    if exitcode == -signal.SIGKILL:
        return "was killed (out of memory? each method loads the model in a process of its own: run fewer methods)"
    return f"ended (exit code {exitcode})"
