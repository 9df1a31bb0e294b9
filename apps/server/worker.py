"""The one thread that owns the model: jobs are run in turn from a bounded queue."""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from edgespec import EdgeSpec, EdgespecError

from .protocol import ApiError


@dataclass
class Job:
    prompt_ids: list[int]
    options: dict
    cache_prompt: bool
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)  # ("piece", str) ... ("done", Completion) | ("error", ApiError)
    cancel: threading.Event = field(default_factory=threading.Event)

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
                self.counts["cancelled" if stream.completion.finish_reason == "cancelled" else "completed"] += 1
                job.put("done", stream.completion)
            except EdgespecError as e:  # the request's fault
                self.counts["failed"] += 1
                job.put("error", ApiError(400, str(e)))
            except Exception as e:  # a bug must not kill the worker: the next request still gets served
                self.counts["failed"] += 1
                job.put("error", ApiError(500, f"internal error: {type(e).__name__}: {e}", kind="server_error"))
            finally:
                self.running = None


