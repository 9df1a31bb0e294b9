"""The one thread that owns the model (jobs run in turn from a bounded queue),
and the one that prepares prompts for it."""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from edgespec import EdgeSpec, EdgespecError
from edgespec.apps.server.protocol import ApiError


@dataclass
class Job:
    prompt_ids: list[int]
    options: dict
    cache_prompt: bool
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)  # ("piece", str) ... ("done", Completion) | ("error", ApiError)
    cancel: threading.Event = field(default_factory=threading.Event)
    timed_out: bool = False

    def expire(self) -> None:
        """The request's deadline passed: stop it, and say so to its client."""
        self.timed_out = True
        self.cancel.set()

    def put(self, kind: str, value: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the server's loop is gone (shutting down)
            self.cancel.set()


class ModelWorker:
    """A single thread that runs the jobs in turn: the only code that evaluates the model
    (handlers only tokenize, which llama.cpp allows beside a decode, as llama-server does)."""

    def __init__(self, llm: EdgeSpec, max_queue: int) -> None:
        self.llm = llm
        self.jobs: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self.running: Job | None = None
        self.counts = {"completed": 0, "cancelled": 0, "failed": 0}
        self.totals = {"generated_tokens": 0, "drafted_tokens": 0, "accepted_tokens": 0}
        self.thread = threading.Thread(target=self._run, name="edgespec-model", daemon=True)
        self.thread.start()

    def submit(self, job: Job) -> None:
        try:
            self.jobs.put_nowait(job)
        except queue.Full:
            raise ApiError(503, f"the server is busy ({self.jobs.maxsize} requests waiting); retry later",
                           kind="server_error", code="queue_full") from None

    def stop(self) -> None:
        if self.running is not None:
            self.running.cancel.set()
        try:
            self.jobs.put_nowait(None)
        except queue.Full:
            pass

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            if job.cancel.is_set():  # its client left while it waited
                self.counts["cancelled"] += 1
                continue
            self.running = job
            try:
                if not job.cache_prompt:
                    self.llm.reset()
                stream = self.llm.stream_ids(job.prompt_ids, cancel=job.cancel, **job.options)
                for piece in stream:
                    job.put("piece", piece)
                assert stream.completion is not None
                self._count(stream.completion)
                job.put("done", stream.completion)
            except EdgespecError as e:  # the request's fault
                self.counts["failed"] += 1
                job.put("error", ApiError(400, str(e)))
            except Exception as e:  # a bug must not kill the worker: the next request still gets served
                self.counts["failed"] += 1
                job.put("error", ApiError(500, f"internal error: {type(e).__name__}: {e}", kind="server_error"))
            finally:
                self.running = None

    def _count(self, completion: Any) -> None:
        self.counts["cancelled" if completion.finish_reason == "cancelled" else "completed"] += 1
        stats = completion.stats
        for name, value in (("generated", stats.generated_tokens), ("drafted", stats.drafted),
                            ("accepted", stats.accepted)):
            self.totals[f"{name}_tokens"] += value


class PromptWorker:
    """Request parsing, chat templates and tokenization run here, off the event loop:
    a 1 MB body takes tens of milliseconds to parse and most of a second to tokenize,
    and /health must answer meanwhile. One thread, so hostile requests wait behind
    each other instead of taking every core; past `max_waiting` they get 503."""

    def __init__(self, max_waiting: int) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="edgespec-prompt")
        self.max_waiting, self.waiting = max_waiting, 0

    async def run(self, fn: Callable[..., Any], *args: Any, param: str | None = None) -> Any:
        if self.waiting > self.max_waiting:
            raise ApiError(503, f"the server is busy ({self.waiting} prompts being prepared); retry later",
                           kind="server_error", code="queue_full")
        self.waiting += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
        except EdgespecError as e:  # the request's fault: a template error, a loop bomb
            raise ApiError(400, str(e), param=param) from None
        finally:
            self.waiting -= 1

    def stop(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


