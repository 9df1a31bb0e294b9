"""The Python API for desktop apps: load once, generate, stream, chat, cancel.

    from edgespec import EdgeSpec
    with EdgeSpec("smollm2-135m", drafter="auto") as llm:
        for piece in llm.chat_stream([{"role": "user", "content": "Hi!"}]):
            print(piece, end="", flush=True)
        print(llm.last_stats.summary())
"""

from __future__ import annotations

import threading
from typing import Any, Iterator, Sequence

from edgespec.chat_template import ChatTemplate
from edgespec.completion import Completion, Stream
from edgespec.drafters import AUTO, make_drafter
from edgespec.errors import ContextOverflowError, EdgespecError
from edgespec.memory.footprint import peak_rss, process_rss
from edgespec.memory.make_plan import make_plan
from edgespec.memory.drafter_choice import named_drafters
from edgespec.memory.plan import Plan
from edgespec.models.store import DEFAULT_MODEL, resolve
from edgespec.runtimes import open_backend
from edgespec.speculative.backend import Backend
from edgespec.speculative.clock import Clock
from edgespec.speculative.controller import DraftController
from edgespec.speculative.drafter import drafter_backends
from edgespec.speculative.engine import Engine
from edgespec.structured.grammar import Grammar, format_type
from edgespec.speculative.stats import GenerationStats
from edgespec.speculative.verifier import SamplingParams
from edgespec.text_stream import TextStream
from edgespec.structured.tools import Tools, with_tools

Message = dict  # {"role": "user" | "assistant" | "system", "content": str}
ONE_CONSTRAINT = "ask for one of json_schema, response_format and tools (or a grammar)"


class EdgeSpec:
    """A target model with a drafter, ready to generate.

    `model` is a model-store name (fetched on first use), a path to a .gguf file
    (llama.cpp) or to an ONNX export folder (ONNX Runtime), or a ready Backend.

    `memory_budget` (bytes, or text such as "900MB" or "1.5GB") covers the whole
    process: the planner picks context, KV cache type, drafter and draft length to
    fit it (see `plan`), and refuses with the minimum when nothing fits. `footprint()`
    reports the live memory against the plan.

    `device` is cpu, gpu, npu or auto: llama.cpp's Vulkan GPU, or ONNX Runtime's execution
    provider (with `ep_options`). Where it does not exist the model runs on the CPU, and
    `notices` says why in one line per model. A budget on a GPU also plans how many layers
    to offload; the first one for a GPU and models measures the driver's memory in a
    child process (driver_memory.py), cached after.

    `threads` fixes the CPU threads. Left None, llama.cpp computes on the physical cores
    less those other programs keep busy, measured before each generation and every second during
    it (`last_stats.threads`).

    `idle_timing`: between answers, once the model has sat idle a second, time the batch
    sizes this machine's cost curve lacks, one batch at a time (an answer that arrives waits
    for one batch at most); the drafter then prices long drafts by what they cost here.

    `clock`: the backend simulates other hardware, whose time draft lengths are planned by
    (a backend that is a Clock, as the fpga-sim one, is its own).
    """

    def __init__(
        self,
        model: str | Backend = DEFAULT_MODEL,
        drafter: str = AUTO,
        n_ctx: int = 4096,
        threads: int | None = None,
        max_draft: int = 16,
        fetch: bool = True,
        quiet: bool = False,
        memory_budget: int | str | None = None,
        device: str = "cpu",
        ep_options: dict[str, str] | None = None,
        idle_timing: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self.plan: Plan | None = None
        opts: dict = {}  # a budget's choices for llama.cpp, target and drafter model alike
        if isinstance(model, Backend):
            if memory_budget is not None:
                raise EdgespecError("a memory budget is planned before loading: pass a model name or path, not a Backend")
            if len(named_drafters(drafter)) > 1:
                raise EdgespecError("a choice among drafters is planned before loading: pass a model name or path, "
                                    "not a Backend, or name one drafter")
            self.backend = model
        else:
            from edgespec.runtimes.llamacpp import init_backend

            init_backend(device)  # llama.cpp sets its devices up once, before planning asks it anything
            path = resolve(model, fetch_missing=fetch, quiet=quiet)
            self.plan = make_plan(path, drafter, n_ctx, max_draft, memory_budget, device)
            if self.plan is not None:
                n_ctx, drafter = self.plan.n_ctx, self.plan.drafter
                max_draft = self.plan.max_draft or max_draft
            if self.plan is not None and self.plan.budget is not None:
                opts = self.plan.backend_options()
        if device != "cpu" or ep_options:  # the drafter model runs where the target runs
            opts = {**opts, "device": device, "ep_options": ep_options}
        if not isinstance(model, Backend):
            self.backend = open_backend(path, n_ctx=n_ctx, threads=threads, **opts)
        if self.backend.vocab_map is not None:
            self.backend.close()
            raise EdgespecError(f"{model} has a trimmed vocabulary (VocabTrim): it can draft, not be the target")
        self.model_name = model if isinstance(model, str) else self.backend.name
        self.tokenizer = self.backend.tokenizer
        controller = DraftController(max_k=max_draft)  # the plan's bound: no batch asks for more logits
        self.drafter_name = drafter
        try:
            self.drafter = make_drafter(drafter, self.tokenizer.n_vocab, controller, self.tokenizer, n_ctx, threads,
                                        opts)
        except BaseException:
            self.backend.close()
            raise
        # threads left to us (None): fewer while other programs hold cores, as a chat beside a build wants
        if clock is None and isinstance(self.backend, Clock):
            clock = self.backend
        self.engine = Engine(self.backend, self.drafter, controller=controller, adapt_threads=threads is None,
                             idle_timing=idle_timing, clock=clock)
        self._active: threading.Event | None = None
        self._template: ChatTemplate | None = None  # compiled on first use

    # -- prompts ----------------------------------------------------------------

    def tokenize(self, text: str, add_bos: bool = True) -> list[int]:
        return self.tokenizer.encode(text, add_bos=add_bos, special=True)

    def apply_chat_template(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                            tools: Tools | None = None) -> str:
        """Render messages with the model's own chat template (Jinja, as in transformers); `tools`
        through it where it renders them, else in the system message (tools.py)."""
        tok = self.tokenizer
        if self._template is None:
            self._template = ChatTemplate(tok.chat_template)
        offered = None
        if tools is not None:
            messages, offered = with_tools(list(messages), tools, "tools" in (tok.chat_template or ""))
        return self._template.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                     tools=offered,
                                     bos_token=tok.token_text(tok.bos_id) if tok.bos_id is not None else "",
                                     eos_token=tok.token_text(tok.eos_id) if tok.eos_id is not None else "")

    def chat_ids(self, messages: Sequence[Message], tools: Tools | None = None) -> list[int]:
        text = self.apply_chat_template(messages, tools=tools)
        tok = self.tokenizer
        # templates that write the BOS themselves must not get a second one
        bos_text = tok.token_text(tok.bos_id) if tok.bos_id is not None else None
        add_bos = not (bos_text and text.startswith(bos_text))
        return self.tokenize(text, add_bos=add_bos)

    # -- generation -------------------------------------------------------------

    def stream_ids(
        self,
        prompt_ids: list[int],
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        cancel: threading.Event | None = None,
        json_schema: dict | str | None = None,
        response_format: dict | None = None,
        grammar: Grammar | None = None,
        tools: Tools | None = None,
    ) -> Stream:
        """Stream the completion of `prompt_ids`. `cancel`, when given, is the event
        that stops it (so a caller can cancel before the first piece exists).

        The answer follows at most one of: `json_schema` (JSON valid against it),
        `response_format` (OpenAI's: text, json_object, json_schema) or a compiled `grammar`;
        `completion.parsed` is then its JSON value. `tools`: the prompt offered them (chat_ids);
        the answer follows their grammar, streams its text only, and ends in `completion.tool_calls`."""
        n_vocab = self.tokenizer.n_vocab
        bad = next((t for t in prompt_ids if not 0 <= t < n_vocab), None)
        if bad is not None:  # caught here: native backends would abort, numpy ones wrap negative ids
            raise ValueError(f"prompt token id {bad} is outside the vocabulary (0..{n_vocab - 1})")
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        if grammar is None:
            grammar = self.grammar(json_schema=json_schema, response_format=response_format, tools=tools)
        elif json_schema is not None or response_format is not None:  # a grammar given with tools is theirs
            raise EdgespecError(ONE_CONSTRAINT)
        cancel = cancel or threading.Event()
        stream = Stream(iter(()), cancel, list(prompt_ids))
        stream._pieces = self._pieces(stream, params, max_tokens, list(stop), grammar, tools)
        return stream

    def grammar(self, json_schema: dict | str | None = None, response_format: dict | None = None,
                tools: Tools | None = None) -> Grammar | None:
        """The compiled grammar of a `json_schema`, an OpenAI `response_format` (None: free text) or
        `tools`, ready for this model's vocabulary; GrammarError names what cannot be compiled.
        At most one of them ({"type": "text"} asks for nothing)."""
        asked = format_type(response_format) not in (None, "text")
        if (json_schema is not None) + asked + (tools is not None) > 1:
            raise EdgespecError(ONE_CONSTRAINT)
        if tools is not None:
            grammar = tools.grammar()
        else:
            grammar = Grammar.json_schema(json_schema) if json_schema is not None else \
                Grammar.response_format(response_format)
        if grammar is not None:
            grammar.constraint(self.tokenizer)  # the vocabulary's view is built here, once per model
        return grammar

    def _pieces(self, stream: Stream, params: SamplingParams, max_tokens: int, stop: list[str],
                grammar: Grammar | None, tools: Tools | None) -> Iterator[str]:
        out = TextStream(stop, tools.shown if tools is not None else None)
        self._active = stream._cancel
        constraint = grammar.constraint(self.tokenizer) if grammar is not None else None
        gen = self.engine.generate(stream.prompt_ids, max_tokens, params, stream._cancel, constraint)
        try:
            for tok in gen:
                stream.token_ids.append(tok)
                piece = out.push(self.tokenizer.token_bytes(tok))
                if out.stopped:
                    break
                if piece:
                    yield piece
            else:
                out.end()
        finally:
            gen.close()
            self._active = None
        text, calls = out.text, []
        if tools is not None:
            content, calls = tools.split(text)
            text = content or ""
        piece = out.rest(text)
        if piece:
            yield piece
        st = self.engine.last_stats
        finish = "stop" if out.stopped else ("tool_calls" if calls and st.finish_reason == "stop" else st.finish_reason)
        stream.completion = Completion(text, stream.prompt_ids, stream.token_ids, finish, st,
                                       structured=grammar is not None and grammar.is_json, tool_calls=calls)

    def stream(self, prompt: str, **kw) -> Stream:
        """Stream a plain completion of `prompt` (no chat template)."""
        return self.stream_ids(self.tokenize(prompt), **kw)

    def generate(self, prompt: str, **kw) -> Completion:
        return _drain(self.stream(prompt, **kw))

    def chat_stream(self, messages: Sequence[Message], tools: list[dict] | None = None, tool_choice: Any = "auto",
                    parallel_tool_calls: bool = True, **kw) -> Stream:
        """Stream the assistant's answer to `messages`, rendered by the model's template. `tools`
        (OpenAI's function tools) with `tool_choice` and `parallel_tool_calls` as OpenAI's: the
        calls end in `completion.tool_calls`, finish_reason "tool_calls"."""
        offered = Tools(tools, tool_choice, parallel_tool_calls) if tools else None
        return self.stream_ids(self.chat_ids(messages, offered), tools=offered, **kw)

    def chat(self, messages: Sequence[Message], **kw) -> Completion:
        return _drain(self.chat_stream(messages, **kw))

    def fit_messages(self, messages: list[Message], max_tokens: int, keep: int = 0) -> tuple[list[int], int]:
        """Token ids of a conversation that fits the context with room for an answer
        (up to `max_tokens`, or a quarter of the context). When it does not fit, the
        oldest user/assistant pairs after the first `keep` messages (a system
        message) are dropped in place until it fills at most half the context, as
        llama.cpp's context shift discards half: the turns after that extend the
        cached prefix instead of each paying a full prefill. Returns (ids, pairs
        dropped). A long chat so stays inside the context, and so inside the plan."""
        n_ctx = self.backend.n_ctx
        room = min(max_tokens, n_ctx // 4)
        ids = self.chat_ids(messages)
        dropped = 0
        if len(ids) + room > n_ctx:
            while len(ids) + room > n_ctx // 2 and len(messages) > keep + 1:
                del messages[keep : keep + 2]
                dropped += 1
                ids = self.chat_ids(messages)
        if len(ids) >= n_ctx:
            raise ContextOverflowError(f"the message is {len(ids)} tokens; the context holds {n_ctx}")
        return ids, dropped

    def cancel(self) -> None:
        """Stop the generation in progress, from any thread."""
        if self._active is not None:
            self._active.set()

    def reset(self) -> None:
        """Forget the conversation's KV cache (the drafter keeps what it learned)."""
        self.engine.reset()

    @property
    def last_stats(self) -> GenerationStats:
        return self.engine.last_stats

    def memory(self) -> dict[str, int]:
        mem = dict(self.backend.memory())
        if self.drafter is not None:
            mem["drafter"] = self.drafter.memory()
        return mem

    def footprint(self) -> dict:
        """The process's memory now and at its peak (psutil; VmHWM), against the
        plan's prediction and the budget: what a desktop app shows."""
        now = process_rss()
        return {
            **now,
            "peak": peak_rss(),
            "predicted": self.plan.footprint.total if self.plan is not None else None,
            "budget": self.plan.budget if self.plan is not None else None,
        }

    @property
    def notices(self) -> list[str]:
        """One line per model (target, then a drafter model) whose device request was not met."""
        lines = []
        for b in [self.backend, *drafter_backends(self.drafter)]:
            if b.notice and b.notice not in lines:
                lines.append(b.notice if b is self.backend else f"drafter: {b.notice}")
        return lines

    def close(self) -> None:
        self.engine.close()
        for b in [*drafter_backends(self.drafter), self.backend]:
            b.close()

    def __enter__(self) -> "EdgeSpec":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drain(stream: Stream) -> Completion:
    for _ in stream:
        pass
    assert stream.completion is not None
    return stream.completion
