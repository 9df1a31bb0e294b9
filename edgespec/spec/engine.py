"""The speculation loop: draft, verify in one batch, roll back, learn.

Invariant: the backend's KV cache holds exactly `self.cached`; the last emitted
token is pending (not yet evaluated) and leads the next batch, as in llama.cpp's
speculative example: eval([pending, d1..dk]) gives k+1 rows of logits; row i
verifies d(i+1) and row n (after n accepted drafts) gives the next token.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Callable, Iterator, Sequence

import numpy as np

from edgespec.errors import ContextOverflowError, EdgespecError
from edgespec.spec import calibration
from edgespec.spec.backend import Backend
from edgespec.spec.controller import DraftController
from edgespec.spec.cpu_load import MIN_SECONDS, OtherLoad, RecentLoad, contends, fitting_threads
from edgespec.spec.drafter import EMPTY, Draft, Drafter, drafter_backends, model_drafters
from edgespec.spec.hindsight import Hindsight
from edgespec.spec.idle import IdleTiming, gate_of
from edgespec.spec.sequence import common_prefix
from edgespec.spec.stats import GenerationStats
from edgespec.spec.verifier import SamplingParams, sample, verify_greedy, verify_sampling


class Engine:
    """One target backend, one drafter (or none), one conversation's KV cache."""

    def __init__(
        self,
        backend: Backend,
        drafter: Drafter | None = None,
        max_draft: int = 16,
        controller: DraftController | None = None,
        calibrate: bool = True,
        adapt_threads: bool = False,
        idle_timing: bool = False,
    ) -> None:
        self.backend = backend
        self.drafter = drafter
        self.controller = controller or DraftController(max_k=max_draft)
        self.max_draft = self.controller.max_k
        # calibrate: time (or load) the batch-cost curve and read and keep each kind's
        # long-run acceptance on disk; off, the controller learns from this process only
        self._calibrate = calibrate and drafter is not None
        self.cached: list[int] = []
        self.last_stats = GenerationStats()
        self._gate = gate_of(backend)  # one generation at a time per backend, idle timing between them
        self._seeded = False  # the controller has read what earlier processes learned of each kind
        # each model drafter's drafted-token count and seconds over generations that ran on
        # quiet cores: a drafter's own counters keep its whole life, loaded stretches too
        self._quiet_steps: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # adapt_threads: compute on the cores other programs leave (cpu_load.fitting_threads),
        # up to the count the backend was opened with; spinning threads that share a core
        # with a busy program lose far more than its share
        # (never above the core count: a backend opened with more threads would otherwise be
        # cut at the first decision and reported as crowded out by other programs)
        opened = backend.n_threads
        self._threads_most: int | None = min(opened, os.cpu_count() or opened) if adapt_threads and opened else None
        self._idle = RecentLoad() if self._threads_most else None  # others' load before the next generation
        self._ran_beside: tuple[float, int] | None = None  # (others' cores, own threads), latest measured
        self._window: OtherLoad | None = None  # others' load in the current second of a generation
        self._curve_borrowed = False  # the cost curve is another thread count's (see _set_threads)
        # idle_timing: between answers, time the batch sizes the curve lacks (idle.py)
        self._idle_timing = IdleTiming(self._gate, self.controller.cost, self._time_idle_batch,
                                       lambda: backend.n_ctx - backend.n_past, self._quiet, self._keep_curve) \
            if idle_timing and self._calibrate and not backend.simulated else None

    # -- cost calibration ---------------------------------------------------

    def calibrate(self, sizes: Sequence[int] | None = None, repeats: int = 3, warm: bool = False,
                  fresh: bool = False, save: bool = True) -> dict[int, float]:
        """Time batches of every size up to max_draft + 1 on the backend, then undo them.

        Generation never calls this (it learns the curve from the batches it runs: see
        `_prepare_curve`); a benchmark or a memory profile does, to start from every size.

        Cheap drafts are only worth verifying if a k-token batch costs little more
        than one token; this measures it on the real kernels of this machine. The
        curve is not smooth (llama.cpp picks kernels by batch size), so every size is
        timed, `repeats` times in turn, and each size keeps its median: one timing of
        a size varies enough to move marginal draft lengths (docs/design.md).
        Results are cached on disk per model, build and machine; `warm` runs every
        size once even then, so a GPU driver compiles all its pipelines now (what a
        memory profile measures) rather than at a draft's first use; `fresh` times
        every size even when a cached curve exists. A curve timed while other processes
        took the cores is not cached (`save=False`: the caller caches it).
        """
        with self._gate.generation():  # nothing else computes on the backend meanwhile
            return self._time_curve(sizes, repeats, warm, fresh, save)

    def _time_curve(self, sizes: Sequence[int] | None, repeats: int, warm: bool, fresh: bool,
                    save: bool) -> dict[int, float]:
        b = self.backend
        base = b.n_past
        if b.simulated:  # its costs are known, not timed
            self.controller.cost.set_timed({n: b.simulated_seconds(n, base)
                                            for n in sizes or range(1, self.max_draft + 2)})
            return self.controller.cost.measured
        key = b.cost_key()
        # a cached curve decoding learned may lack sizes it never ran: those are timed too
        cached = sizes is None and not fresh and calibration.load(key, self.controller.cost) \
            and self.controller.cost.complete
        if cached:
            self._curve_borrowed = False
        if cached and not warm:
            return self.controller.cost.measured
        sizes = [n for n in (sizes or range(1, self.max_draft + 2)) if base + n <= b.n_ctx]
        load = OtherLoad() if save else None
        filler = self.cached[-1] if self.cached else (b.tokenizer.bos_id or 0)
        # warm-up: first calls pay for allocations and cold caches; on a GPU, each batch
        # size's first call also builds its shader pipelines (lavapipe: seconds), so all of them
        for n in (1, 1, 4) if b.device == "CPU" else (1, *sizes):
            b.eval([filler] * min(n, b.n_ctx - base))
            b.rollback(base)
        if cached:
            return self.controller.cost.measured
        for _ in range(2):  # once more if the curve is implausible: something else took the cores
            times: dict[int, list[float]] = {}
            for _ in range(max(1, repeats)):
                for n in [*sizes, 1]:  # one token again at the end: the unit all others are compared to
                    t0 = time.perf_counter()
                    b.eval([filler] * n)
                    times.setdefault(n, []).append(time.perf_counter() - t0)
                    b.rollback(base)
            timed = {n: float(np.median(t)) for n, t in times.items()}
            if calibration.plausible(timed):
                break
        self.controller.cost.set_timed(timed)
        self._curve_borrowed = False
        if load is not None and not self._contended(load.cores()):
            calibration.save(key, self.controller.cost)
        return self.controller.cost.measured

    def _prepare_curve(self) -> None:
        """Before a generation, without timing anything: the curve earlier runs on this
        machine learned, else what this process measured so far (decoding adds each size
        it runs; the controller prices the others pessimistically). A curve that drifted
        keeps the sizes decoding measured lately and learns the rest again."""
        b, cost = self.backend, self.controller.cost
        if b.simulated:  # its costs are known, not timed
            if not cost.calibrated:
                self._time_curve(None, 1, warm=False, fresh=False, save=False)
            return
        if cost.calibrated and cost.drifted():
            cost.relearn()
        elif not cost.calibrated and not self._curve_borrowed:
            try:
                calibration.load(b.cost_key(), cost)
            except OSError:  # the model file went away: nothing to key a curve by
                pass

    def _keep_curve(self) -> None:
        """After a generation on quiet cores: keep the curve as decoding refined it, for the
        next process (a curve that drifted keeps only what decoding measured lately)."""
        cost = self.controller.cost
        if cost.drifted():
            cost.relearn()
        if not cost.calibrated or self._curve_borrowed or self.backend.simulated:
            return
        try:
            calibration.save(self.backend.cost_key(), cost)
        except OSError:  # the model file went away: nothing to key it by
            pass

    def _keep_drafter_steps(self, before: dict) -> None:
        """Add this generation's drafted tokens and their seconds (each model drafter's
        `token_cost` now against `before`) to the quiet total, and cache each drafter's mean:
        what the planner weighs drafters by."""
        for d, (n0, s0) in before.items():
            n1, s1 = d.token_cost
            n, s = self._quiet_steps.get(d, (0, 0.0))
            self._quiet_steps[d] = (n + n1 - n0, s + s1 - s0)
        calibration.save_drafter_steps((d, self._quiet_steps[d]) for d in before)

    def _fit_threads(self) -> None:
        """Before a generation: as many threads as the cores other programs leave, as measured
        while this engine sat idle (a chat's wait for the next message) or else at the end
        of the last generation."""
        b = self.backend
        idle = self._idle.cores() if self._idle is not None else None
        if self._idle is not None:
            self._idle.close()
        if idle is not None:
            self._set_threads(fitting_threads(idle, b.n_threads, self._threads_most, running=False))
        elif self._ran_beside is not None:
            self._set_threads(fitting_threads(*self._ran_beside, self._threads_most, running=True))

    def _watch_threads(self) -> None:
        """During a generation, once a second: a program that starts mid-answer gets its
        core as soon as it is measured, and gives it back the same way."""
        w = self._window
        if w is None or w.seconds() < MIN_SECONDS:
            return
        other = w.cores()
        self._window = OtherLoad()
        if other is not None:
            self._ran_beside = (other, self.backend.n_threads)
            self._set_threads(fitting_threads(other, self.backend.n_threads, self._threads_most, running=True))

    def _set_threads(self, n: int) -> None:
        """Compute on n threads from now on, model drafters too. Batch costs depend on the
        count: the curve cached for n is loaded; without one, the curve in use goes on
        (decoding refines it) but is not cached as n's, and nothing is timed mid-answer."""
        b = self.backend
        if n == b.n_threads or not b.set_threads(n):
            return
        for d in drafter_backends(self.drafter):
            d.set_threads(n)
        self._quiet_steps.clear()  # a drafter's step cost is kept per thread count too
        if self._calibrate:
            try:
                self._curve_borrowed = not calibration.load(b.cost_key(), self.controller.cost)
            except OSError:  # the model file went away: nothing to key a curve by
                self._curve_borrowed = True

    def _time_idle_batch(self, n: int) -> float | None:
        """Seconds of one batch of n tokens after what the cache holds, undone after (the
        backend held); None where the context has no room, or the curve in use is another
        thread count's (it is not this count's to refine)."""
        b = self.backend
        base = b.n_past
        if self._curve_borrowed or base + n > b.n_ctx:
            return None
        filler = self.cached[-1] if self.cached else (b.tokenizer.bos_id or 0)
        t0 = time.perf_counter()
        b.eval([filler] * n)
        seconds = time.perf_counter() - t0
        b.rollback(base)
        return seconds

    def _quiet(self, load: OtherLoad) -> bool:
        return not self._contended(load.cores())

    def close(self) -> None:
        """Stop timing at idle and watching other programs' load (the backends are their
        owner's to close)."""
        if self._idle_timing is not None:
            self._idle_timing.close()
        if self._idle is not None:
            self._idle.close()

    def _contended(self, other_cores: float | None) -> bool:
        """Whether other processes took cores the backend's threads wanted (cpu_load.py)."""
        return contends(other_cores, self.backend.n_threads or os.cpu_count() or 1)

    # -- generation -----------------------------------------------------------

    def reset(self) -> None:
        """Forget the conversation (the drafter's learned statistics stay); after the batch
        idle timing may be running, which undoes itself to where the cache stood."""
        with self._gate.generation():
            self.backend.rollback(0)
            self.cached = []

    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int = 256,
        params: SamplingParams | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[int]:
        """Yield generated token ids; statistics land in `self.last_stats`.

        End-of-generation tokens stop the stream and are not yielded.
        """
        params = params or SamplingParams()
        prompt = list(prompt)
        b = self.backend
        if not prompt:
            raise EdgespecError("the prompt is empty")
        if max_tokens < 1:
            raise EdgespecError(f"max_tokens must be at least 1, not {max_tokens}")
        if len(prompt) >= b.n_ctx:
            raise ContextOverflowError(
                f"the prompt is {len(prompt)} tokens; the context holds {b.n_ctx} (leave room for the answer)"
            )
        with self._gate.generation():
            yield from self._generate(prompt, max_tokens, params, cancel)

    def _generate(self, prompt: list[int], max_tokens: int, params: SamplingParams,
                  cancel: threading.Event | None) -> Iterator[int]:
        """Prefill, then draft -> verify -> accept -> emit until an end, the limit or a cancel."""
        b = self.backend
        threads = self._begin_threads()
        rng = np.random.default_rng(params.seed)
        st = self.last_stats = GenerationStats(prompt_tokens=len(prompt), finish_reason="length")
        st.threads_most = self._threads_most or threads
        t_start, load = time.perf_counter(), OtherLoad()
        pending = [self._prefill(prompt, params, rng, st)]
        st.prefill_s = time.perf_counter() - t_start
        if self._window is not None:
            self._watch_threads()  # a prompt read slowly beside a new load: before anything is timed
        if self._calibrate:
            self._prepare_curve()
        history = list(prompt)
        steps_before = {d: d.token_cost for d in model_drafters(self.drafter)}
        hindsight = self._begin_drafter(history, params, rng, st)
        ended = False  # the answer ran to its end: not abandoned (closed, interrupted, collected at exit)
        try:
            while not (yield from self._emit(pending, history, st, max_tokens, t_start)):
                if hindsight is not None:
                    hindsight.advance(history)
                if self._window is not None:
                    self._watch_threads()
                if cancel is not None and cancel.is_set():
                    st.finish_reason = "cancelled"
                    break
                room = b.n_ctx - b.n_past - 1  # batch = [last, *draft] must fit
                if room < 0:
                    st.finish_reason = "context"
                    break
                k_cap = min(self.max_draft, max_tokens - st.generated_tokens - 1, room)
                draft = self._draft(history, k_cap, st, hindsight)
                pending = self._verify(history, draft, params, rng, st)
            ended = True
        finally:
            self._end(st, t_start, load, threads, ended, steps_before, params)

    def _begin_threads(self) -> int | None:
        """Fit the thread count to the cores others leave; the count this generation starts on."""
        if self._threads_most:
            self._fit_threads()
            self._window, self._ran_beside = OtherLoad(), None
        return self.backend.n_threads

    def _prefill(self, prompt: list[int], params: SamplingParams, rng: np.random.Generator,
                 st: GenerationStats) -> int:
        """Evaluate what the cache lacks of the prompt (a chat turn extends the previous one;
        at least one token is evaluated, for the logits of the first answer token)."""
        b = self.backend
        keep = min(common_prefix(self.cached, prompt), len(prompt) - 1)
        b.rollback(keep)
        self.cached = self.cached[:keep]
        logits = b.eval(prompt[keep:], n_logits=1)[0]
        self.cached = list(prompt)
        return sample(logits, params, rng)

    def _begin_drafter(self, history: list[int], params: SamplingParams, rng: np.random.Generator,
                       st: GenerationStats) -> Hindsight | None:
        """Seed acceptance from earlier processes, start this prompt's acceptance evidence
        afresh (`AcceptanceModel.new_context`), let the drafter read the prompt; the
        hindsight learner for this generation (greedy only: a sampled token is one draw,
        not the verdict on a draft)."""
        drafter, path = self.drafter, self.backend.path
        if self._calibrate and params.greedy and not self._seeded and path is not None:
            # sampled acceptance depends on the temperature: only greedy runs are kept and read
            self._seeded = True
            self.controller.acceptance.seed(calibration.load_kinds(path, model_drafters(drafter)))
        self.controller.acceptance.new_context()
        if drafter is None:
            return None
        t0 = time.perf_counter()
        drafter.sample_with(None if params.greedy else params, rng)
        drafter.begin(history)
        st.prefill_s += time.perf_counter() - t0  # a model drafter reads the prompt: prompt processing
        return Hindsight(self.controller.acceptance) if params.greedy else None

    def _emit(self, pending: list[int], history: list[int], st: GenerationStats, max_tokens: int,
              t_start: float) -> Iterator[int]:
        """Yield what the last step produced; returns True when the answer is over."""
        for t in pending:
            if self.backend.tokenizer.is_eog(t):
                st.finish_reason = "stop"
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
        """At most k_cap tokens, as many as the controller expects to pay for themselves."""
        drafter, ctl = self.drafter, self.controller
        if drafter is None or k_cap <= 0:
            return EMPTY
        t0 = time.perf_counter()
        draft = EMPTY
        k_cap = drafter.planned_length(ctl, k_cap)
        if k_cap > 0:
            m0 = drafter.model_seconds
            draft = drafter.propose_planned(ctl, history, k_cap)
            draft = draft.truncated(through_end(draft.tokens, self.backend.tokenizer.is_eog))
            st.drafter_model_s += drafter.model_seconds - m0
        if len(draft) and draft.probs is None:
            # a sampled draft is verified whole: where the drafter stopped depends on its
            # draws, so cutting it by its length would bias which tokens get proposed (its
            # length was planned beforehand). What is cut off, or declined whole, is learned
            # in hindsight
            proposed = draft
            draft = draft.truncated(ctl.choose(draft.key, len(draft), explore=hindsight is None))
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
        if params.greedy:
            verdict = verify_greedy(draft.tokens, out)
        else:
            verdict = verify_sampling(draft.tokens, draft.probs, out, params, rng)
        n = verdict.n_accepted
        if n < k:
            b.rollback(n_before + 1 + n)
        self.cached.extend(batch[: 1 + n])
        st.record_step(draft.key, k, n)
        if self.drafter is not None:
            sim = b.simulated_seconds(len(batch), n_before)
            self.controller.record(draft.key, k, n, len(batch), dt if sim is None else sim)
            t0 = time.perf_counter()
            self.drafter.observe(history, batch[: n + 1], out[: n + 1], verdict.next_token)
            st.draft_s += time.perf_counter() - t0
        return [*draft.tokens[:n], verdict.next_token]

    def _end(self, st: GenerationStats, t_start: float, load: OtherLoad, threads: int | None, ended: bool,
             steps_before: dict, params: SamplingParams) -> None:
        """Close the stats; keep what was learned, unless other programs' load distorted it."""
        b = self.backend
        st.total_s = time.perf_counter() - t_start
        st.other_cores = load.cores()
        st.threads = b.n_threads
        # timings are kept per thread count: one that changed midway describes neither
        steady = st.threads == threads
        if self._threads_most:
            if self._ran_beside is None and st.other_cores is not None and steady:
                self._ran_beside = (st.other_cores, st.threads)
            # no thread is started for an abandoned generator: it may be collected while the
            # interpreter exits, when a thread's start never returns
            self._window, self._idle = None, RecentLoad() if ended else None
        # timed while other processes took the cores: the timings describe that load,
        # so neither a drafter's step cost nor the cost curve (kept or forgotten) is cached
        quiet = steady and not self._contended(st.other_cores)
        if quiet:
            self._keep_drafter_steps(steps_before)
        if self._calibrate and quiet:
            self._keep_curve()
        if self._idle_timing is not None and ended:
            self._idle_timing.wake()
        counts = self.controller.acceptance.take_counts()
        drafters = model_drafters(self.drafter)
        if params.greedy and b.path is not None:  # sampled acceptance depends on the temperature
            calibration.save_acceptance(b.path, drafters, st.by_key)
            if self._calibrate:
                calibration.save_kinds(b.path, drafters, counts)


def through_end(tokens: Sequence[int], is_eog: Callable[[int], bool]) -> int:
    """How many of `tokens` a draft keeps: up to its first end-of-generation token,
    included. The answer ends there if that token is accepted, and the text parts from
    the draft there if not, so rows after it are verified for nothing. A copy of a chat
    question runs into its end-of-turn token within a few tokens."""
    return next((i + 1 for i, t in enumerate(tokens) if is_eog(t)), len(tokens))
