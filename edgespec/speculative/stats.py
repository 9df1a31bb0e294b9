"""Speculation statistics (after onnxruntime-genai's speculative_stats and
llama.cpp's per-drafter counters)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from edgespec.speculative.drafter import Kind


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    steps: int = 0  # target evaluations after the prefill
    drafted: int = 0  # draft tokens sent to verification
    accepted: int = 0
    position_tried: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    first_token_s: float | None = None  # start to the first generated token (None: none was generated)
    verify_s: float = 0.0  # backend time of the decode steps
    draft_s: float = 0.0
    drafter_model_s: float = 0.0  # of draft_s: a model drafter's own evaluations
    total_s: float = 0.0
    finish_reason: str = ""
    other_cores: float | None = None  # cores other processes kept busy meanwhile (cpu_load.py)
    threads: int | None = None  # CPU threads the target computed on (None: not a CPU thread pool)
    threads_most: int | None = None  # what they may grow to: fewer while other programs hold cores
    by_key: dict[str, list[int]] = field(default_factory=dict)  # drafter family -> [drafted, accepted]
    forced_tokens: int = 0  # emitted because a grammar allowed nothing else: verified, never drafted
    grammar_s: float = 0.0  # of the decoding: the grammar's masks, forced tokens and checks
    closed: bool = False  # the limit came ("length") and the grammar's answer is whole: the text is valid

    def record_step(self, kind: Kind, k: int, n_accepted: int, forced: int = 0) -> None:
        """A verified draft of k tokens, n_accepted of them accepted; its first `forced` were a
        grammar's (certain, counted apart from the drafter's)."""
        self.forced_tokens += forced
        k, n_accepted = k - forced, n_accepted - forced
        self.steps += 1
        self.drafted += k
        self.accepted += n_accepted
        if k:
            while len(self.position_tried) < k:
                self.position_tried.append(0)
                self.position_accepted.append(0)
            for i in range(min(n_accepted + 1, k)):
                self.position_tried[i] += 1
            for i in range(n_accepted):
                self.position_accepted[i] += 1
            d = self.by_key.setdefault(kind.family, [0, 0])
            d[0] += k
            d[1] += n_accepted

    @property
    def decode_s(self) -> float:
        return max(self.total_s - self.prefill_s, 1e-9)

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of decoding (prefill excluded, as llama.cpp reports eval speed)."""
        return self.generated_tokens / self.decode_s if self.generated_tokens else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Tokens produced per target evaluation (accepted drafts + the target's own)."""
        return (self.steps + self.accepted) / self.steps if self.steps else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / t if t else 0.0 for a, t in zip(self.position_accepted, self.position_tried)]

    @property
    def overhead_ms_per_token(self) -> float:
        """Engine time per generated token that is neither the target's evaluation nor
        a model drafter's (drafting, verification, bookkeeping: what the engine adds)."""
        if not self.generated_tokens:
            return 0.0
        return 1000.0 * max(self.decode_s - self.verify_s - self.drafter_model_s, 0.0) / self.generated_tokens

    def to_dict(self) -> dict:
        d = asdict(self)
        for name in ("tokens_per_s", "acceptance_rate", "mean_accepted", "acceptance_by_position",
                     "overhead_ms_per_token", "decode_s"):
            d[name] = getattr(self, name)
        return d

    def summary(self) -> str:
        s = f"{self.generated_tokens} tokens, {self.tokens_per_s:.1f} tok/s"
        if self.drafted:
            s += (f", acceptance {self.acceptance_rate:.0%}, {self.mean_accepted:.2f} tokens/step")
        if self.threads and self.threads_most and self.threads < self.threads_most:
            s += f", {self.threads} of {self.threads_most} threads (other programs are busy)"
        return s
