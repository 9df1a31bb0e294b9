"""The speculation loop: draft, verify in one batch, roll back, learn.

Invariant: the backend's KV cache holds exactly `self.cached`; the last emitted
token is pending (not yet evaluated) and leads the next batch, as in llama.cpp's
speculative example: eval([pending, d1..dk]) gives k+1 rows of logits; row i
verifies d(i+1) and row n (after n accepted drafts) gives the next token.
"""

from __future__ import annotations

import threading
import time
from typing import Iterator, Sequence

import numpy as np

from edgespec.speculative.backend import Backend
from edgespec.speculative.clock import Clock
from edgespec.speculative.controller import DraftController
from edgespec.speculative.cpu_load import OtherLoad
from edgespec.speculative.drafter import EMPTY, Draft, Drafter, drafter_backends
from edgespec.speculative.constraint import Constraint, Unconstrained
from edgespec.speculative.hindsight import Hindsight
from edgespec.speculative.idle import IdleTiming, gate_of
from edgespec.speculative.learned import Learned
from edgespec.speculative.sequence import checked_request, common_prefix
from edgespec.speculative.stats import GenerationStats
from edgespec.speculative.threads import ThreadFitting
from edgespec.speculative.verifier import SamplingParams, sample, verify_greedy, verify_sampling


class Engine:
    """One target backend, one drafter (or none), one conversation's KV cache. `clock`: the
    backend simulates other hardware, whose time the controller plans by (clock.py).
    `calibrate`: read and keep the cost curve and each kind's acceptance (learned.py).
    `adapt_threads`: compute on the cores other programs leave (threads.py). `idle_timing`:
    between answers, time the batch sizes the curve lacks (idle.py)."""

    def __init__(self, backend: Backend, drafter: Drafter | None = None, max_draft: int = 16,
                 controller: DraftController | None = None, calibrate: bool = True, adapt_threads: bool = False,
                 idle_timing: bool = False, clock: Clock | None = None) -> None:
        self.backend = backend
        self.drafter = drafter
        self.clock = clock
        self.learned = Learned(backend, controller or DraftController(max_k=max_draft), drafter,
                               calibrate and drafter is not None, clock)
        self.max_draft = self.controller.max_k
        self.threads = ThreadFitting(backend, adapt_threads, drafter_backends(drafter), self.learned.threads_changed)
        self.cached: list[int] = []
        self.last_stats = GenerationStats()
        self.constraint: Constraint = Unconstrained()  # the generation's (generate's `constraint`)
        self._gate = gate_of(backend)  # one generation at a time per backend, idle timing between them
        timing = idle_timing and self.learned.keep and clock is None
        self._idle_timing = IdleTiming(self._gate, self.controller.cost, self._time_idle_batch,
                                       lambda: backend.n_ctx - backend.n_past, self.threads.quiet,
                                       self.learned.keep_curve) if timing else None

    @property
    def controller(self) -> DraftController:
        return self.learned.controller

    def calibrate(self, sizes: Sequence[int] | None = None, repeats: int = 3, warm: bool = False,
                  fresh: bool = False, save: bool = True) -> dict[int, float]:
        """Time batches of every size up to max_draft + 1, then undo them: what a benchmark or a
        memory profile starts from (generation learns the curve from the batches it runs).
        `warm`, `fresh`, `save`: as Learned.time_curve's."""
        with self._gate.generation():  # nothing else computes on the backend meanwhile
            return self.learned.time_curve(sizes, repeats, warm, fresh, self.threads.quiet if save else None,
                                           self._filler())

    def _filler(self) -> int:
        return self.cached[-1] if self.cached else (self.backend.tokenizer.bos_id or 0)

    def _time_idle_batch(self, n: int) -> float | None:
        """Seconds of one batch of n tokens after what the cache holds, undone after; None where
        the context has no room, or the curve in use is another thread count's (not its to refine)."""
        base = self.backend.n_past
        if self.learned.borrowed or base + n > self.backend.n_ctx:
            return None
        return self.learned.time_batch(n, self._filler(), undo_to=base)

    def close(self) -> None:
        """Stop timing at idle and watching others' load (the backends are their owner's to close)."""
        if self._idle_timing is not None:
            self._idle_timing.close()
        self.threads.close()

    # -- generation -----------------------------------------------------------

    def reset(self) -> None:
        """Forget the conversation (the drafter's learned statistics stay); after the batch
        idle timing may be running, which undoes itself to where the cache stood."""
        with self._gate.generation():
            self.backend.rollback(0)
            self.cached = []

    def generate(self, prompt: Sequence[int], max_tokens: int = 256, params: SamplingParams | None = None,
                 cancel: threading.Event | None = None, constraint: Constraint | None = None) -> Iterator[int]:
        """Yield generated token ids; statistics land in `self.last_stats`. End-of-generation
        tokens stop the stream and are not yielded. `constraint`: a grammar the answer follows."""
        prompt = checked_request(prompt, max_tokens, self.backend.n_ctx)
        with self._gate.generation():
            self.constraint = constraint or Unconstrained()
            self.constraint.begin(max_tokens)
            yield from self._generate(prompt, max_tokens, params or SamplingParams(), cancel)

    def _generate(self, prompt: list[int], max_tokens: int, params: SamplingParams,
                  cancel: threading.Event | None) -> Iterator[int]:
        """Prefill, then draft -> verify -> accept -> emit until an end, the limit or a cancel."""
        threads = self.threads.begin()
        rng = np.random.default_rng(params.seed)
        st = self.last_stats = GenerationStats(prompt_tokens=len(prompt), finish_reason="length")
        st.threads_most = self.threads.most or threads
        t_start, load = time.perf_counter(), OtherLoad()
        pending = self._prefill(prompt, params, rng, st)
        st.prefill_s = time.perf_counter() - t_start
        self.threads.watch()  # a prompt read slowly beside a new load: before anything is timed
        self.learned.before(params.greedy)
        history = list(prompt)
        steps_before = self.learned.drafter_steps()
        hindsight = self._begin_drafter(history, params, rng, st)
        ended = False  # the answer ran to its end: not abandoned (closed, interrupted, collected at exit)
        try:
            while not (yield from self._emit(pending, history, st, max_tokens, t_start)):
                if hindsight is not None:
                    hindsight.advance(history)
                self.threads.watch()
                if cancel is not None and cancel.is_set():
                    st.finish_reason = "cancelled"
                    break
                room = self.backend.n_ctx - self.backend.n_past - 1  # batch = [last, *draft] must fit
                if room < 0:
                    st.finish_reason = "context"
                    break
                k_cap = min(self.max_draft, max_tokens - st.generated_tokens - 1, room)
                draft = self._draft(history, k_cap, st, hindsight)
                pending = self._verify(history, draft, params, rng, st)
            ended = True
        finally:
            self._end(st, t_start, load, threads, ended, steps_before, params)

    def _prefill(self, prompt: list[int], params: SamplingParams, rng: np.random.Generator,
                 st: GenerationStats) -> list[int]:
        """Evaluate what the cache lacks of the prompt (a chat turn extends the previous one;
        at least one token is evaluated, for the logits of the first answer token); the first
        token(s) to emit."""
        b = self.backend
        keep = min(common_prefix(self.cached, prompt), len(prompt) - 1)
        b.rollback(keep)
        self.cached = self.cached[:keep]
        logits = self.constraint.masked([], b.eval(prompt[keep:], n_logits=1), params.greedy)[0]
        self.cached = list(prompt)
        return self.constraint.commit([sample(logits, params, rng)])

    def _begin_drafter(self, history: list[int], params: SamplingParams, rng: np.random.Generator,
                       st: GenerationStats) -> Hindsight | None:
        """Acceptance evidence afresh for this prompt, the drafter reads it; the hindsight learner
        (greedy only: a sampled token is one draw, not the verdict on a draft)."""
        self.controller.acceptance.new_context()
        if self.drafter is None:
            return None
        t0 = time.perf_counter()
        self.drafter.begin(history, None if params.greedy else (params, rng))
        st.prefill_s += time.perf_counter() - t0  # a model drafter reads the prompt: prompt processing
        return Hindsight(self.controller.acceptance) if params.greedy else None

    def _emit(self, pending: list[int], history: list[int], st: GenerationStats, max_tokens: int,
              t_start: float) -> Iterator[int]:
        """Yield what the last step produced; returns True when the answer is over."""
        for t in pending:
            if self.backend.tokenizer.is_eog(t):
                st.finish_reason = "length" if self.constraint.closed else "stop"
                return True
            history.append(t)
            st.generated_tokens += 1
            if st.first_token_s is None:
                st.first_token_s = time.perf_counter() - t_start
            yield t
            if st.generated_tokens >= max_tokens:
                return True
        return False

    def _draft(self, history: list[int], k_cap: int, st: GenerationStats, hindsight: Hindsight | None) -> Draft:
        """The tokens the constraint forces, then the drafter's, as many as the controller expects
        to pay for themselves; cut at the first the constraint refuses."""
        forced = self.constraint.forced(k_cap) if self.drafter is not None else []  # plain decoding: a token a step
        draft = self._proposed([*history, *forced] if forced else history, k_cap - len(forced), st, hindsight)
        return draft.after(forced).legal(self.constraint.legal(forced + draft.tokens))

    def _proposed(self, history: list[int], k_cap: int, st: GenerationStats, hindsight: Hindsight | None) -> Draft:
        """The drafter's tokens after `history`, as many as the controller expects to pay."""
        drafter, ctl = self.drafter, self.controller
        if drafter is None or k_cap <= 0 or (k_cap := ctl.draft_length(drafter.cost, k_cap)) <= 0:
            return EMPTY
        t0, m0 = time.perf_counter(), sum(c.eval_s for c in drafter.models())
        draft = drafter.propose(history, k_cap)
        ctl.asked(drafter.cost, draft)
        draft = draft.through_end(self.backend.tokenizer.is_eog)
        st.drafter_model_s += sum(c.eval_s for c in drafter.models()) - m0
        if len(draft) and draft.probs is None:
            # a sampled draft is verified whole (its length was planned): cut by its length, its
            # draws would bias what is proposed. What is cut off, or declined, is learned in hindsight
            proposed = draft
            draft = draft.truncated(ctl.choose(draft.kind, len(draft), explore=hindsight is None))
            if hindsight is not None:
                hindsight.add(proposed, len(history), verified=len(draft))
        st.draft_s += time.perf_counter() - t0
        return draft

    def _verify(self, history: list[int], draft: Draft, params: SamplingParams, rng: np.random.Generator,
                st: GenerationStats) -> list[int]:
        """Evaluate [last, *draft] in one batch, keep the accepted prefix, roll back the rest;
        the tokens to emit next (accepted drafts, then the target's own)."""
        b, k = self.backend, len(draft)
        batch = [history[-1], *draft.tokens]
        n_before = b.n_past
        t0 = time.perf_counter()
        out = b.eval(batch)
        dt = time.perf_counter() - t0
        st.verify_s += dt
        scores = self.constraint.masked(draft.tokens, out, params.greedy)
        verdict = verify_greedy(draft.tokens, scores) if params.greedy else \
            verify_sampling(draft.tokens, draft.probs, scores, params, rng)
        n, f = verdict.n_accepted, draft.forced  # forced tokens are certain: n >= f
        if n < k:
            b.rollback(n_before + 1 + n)
        self.cached.extend(batch[: 1 + n])
        emitted = self.constraint.commit([*draft.tokens[:n], verdict.next_token])
        st.record_step(draft.kind, k, n, forced=f)
        if self.drafter is not None:
            charged = dt if self.clock is None else self.clock.seconds(len(batch), n_before)
            self.controller.record(draft.kind, k - f, n - f, len(batch), charged)
            t0 = time.perf_counter()
            self.drafter.observe(history, batch[: n + 1], out[: n + 1], verdict.next_token)
            st.draft_s += time.perf_counter() - t0
        return emitted

    def _end(self, st: GenerationStats, t_start: float, load: OtherLoad, threads: int | None, ended: bool,
             steps_before: dict, params: SamplingParams) -> None:
        """Close the stats; keep what was learned, unless other programs' load distorted it."""
        st.total_s = time.perf_counter() - t_start
        st.grammar_s, st.closed = self.constraint.seconds, self.constraint.closed
        st.other_cores = load.cores()
        st.threads = self.backend.n_threads
        steady = st.threads == threads  # timings are kept per thread count: one that changed midway describes neither
        quiet = self.threads.end(st.other_cores, steady, ended)
        self.learned.after(st, quiet, steps_before, params.greedy)
        if self._idle_timing is not None and ended:
            self._idle_timing.wake()
