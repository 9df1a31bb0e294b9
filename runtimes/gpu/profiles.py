"""Device profiles: what a phone's or a laptop's GPU would make of a model, projected.

There is no such GPU here, so nothing about them is measured. A profile holds public peak
figures (memory bandwidth, FP16 throughput, memory); `RooflineCost` turns them into the
seconds of one call: reading the weights and the KV cache at an achieved fraction of peak
bandwidth, or doing the arithmetic at an achieved fraction of peak compute, whichever is
longer, plus a dispatch cost per layer. It is a roofline: what a well-tuned GPU backend
could reach on that device, an optimistic bound rather than what any runtime reaches there
today. On such GPUs verifying k draft tokens costs about what
one token costs until compute catches up with bandwidth, which is why speculation pays more
there than on this CPU. `edgespec bench --device-profile NAME` runs the drafters on the real
model here (so acceptance is measured) while the controller plans from, and the bench adds
up, the profile's costs; every figure it prints from a profile is labelled a projection.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.errors import EdgespecError
from edgespec.runtimes.fpga.cost import Cost

# Achieved fractions of peak and a dispatch cost per layer (about ten kernels of ~10 us
# each): assumptions, not measurements.
BANDWIDTH_EFFICIENCY = 0.5
COMPUTE_EFFICIENCY = 0.3
LAYER_OVERHEAD_S = 0.1e-3


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    memory_bytes: int  # what a model may use: on shared memory, part of the system RAM
    shared_memory: bool  # the GPU's memory is the system RAM
    bandwidth: float  # bytes/s, peak
    fp16_flops: float  # FLOP/s, peak
    source: str


GiB = 1 << 30
PROFILES = {p.name: p for p in [
    DeviceProfile("adreno-750", "Qualcomm Adreno 750 (Snapdragon 8 Gen 3), LPDDR5X-4800", 6 * GiB, True,
                  76.8e9, 5.6e12, "64-bit LPDDR5X-4800: 76.8 GB/s; about 2.8 TFLOPS FP32, FP16 at twice the rate; "
                  "half of a 12 GB phone's RAM for one app"),
    DeviceProfile("mali-g720", "Arm Immortalis-G720 MC12 (Dimensity 9300), LPDDR5T-9600", 6 * GiB, True,
                  76.8e9, 7.0e12, "64-bit LPDDR5T at 9600 MT/s: 76.8 GB/s; about 3.5 TFLOPS FP32, FP16 at twice "
                  "the rate; half of a 12 GB phone's RAM for one app"),
    DeviceProfile("apple-m3", "Apple M3, 10-core GPU, unified LPDDR5", 5 * GiB, True,
                  100e9, 3.6e12, "100 GB/s unified memory; about 3.6 TFLOPS FP32, FP16 at the same rate; "
                  "the GPU's share of an 8 GB Mac"),
    DeviceProfile("laptop-igpu", "Intel Iris Xe 96 EU, LPDDR4X-4266", 8 * GiB, True,
                  68.3e9, 4.1e12, "128-bit LPDDR4X-4266: 68.3 GB/s; 96 EU x 16 FP16 FMA lanes x 1.35 GHz; "
                  "half of a 16 GB laptop's RAM"),
]}


@dataclass(frozen=True)
class ModelShape:
    """What a call's cost depends on, from a GGUF's facts (models.facts.ModelFacts)."""

    weight_bytes: int
    n_layer: int
    n_embd: int
    q_dim: int
    kv_dim: int  # K and V width per layer
    n_ff: int
    n_vocab: int

    @classmethod
    def from_facts(cls, f) -> "ModelShape":
        return cls(f.tensor_bytes, f.n_layer, f.n_embd, f.n_head * f.head_k, f.n_head_kv * (f.head_k + f.head_v) // 2,
                   f.n_ff, f.n_vocab)

    def flops_per_token(self, context: int) -> float:
        d = self.n_embd
        linear = self.n_layer * (2 * d * self.q_dim + 2 * 2 * d * self.kv_dim + 2 * self.q_dim * d + 3 * 2 * d * self.n_ff)
        attention = self.n_layer * 2 * 2 * context * self.q_dim  # scores and weighted values
        return linear + attention + 2 * d * self.n_vocab


class RooflineCost:
    """A profile's seconds for one call: the interface of fpga.cost.CostModel, so the
    same BoardClock prices a run on it."""

    def __init__(self, profile: DeviceProfile, shape: ModelShape) -> None:
        self.board, self.shape = profile, shape

    def eval_cost(self, n: int, n_past: int, n_logits: int | None = None) -> Cost:
        s, p = self.shape, self.board
        ctx = n_past + n
        kv_bytes = 2 * s.n_layer * 2 * s.kv_dim * ctx  # f16 K and V, read once per call
        memory_s = (s.weight_bytes + kv_bytes) / (p.bandwidth * BANDWIDTH_EFFICIENCY)
        compute_s = n * s.flops_per_token(n_past + (n + 1) // 2) / (p.fp16_flops * COMPUTE_EFFICIENCY)
        return Cost(max(memory_s, compute_s) + s.n_layer * LAYER_OVERHEAD_S,
                    "compute" if compute_s > memory_s else "bandwidth")

    def decode_tokens_per_s(self, context: int) -> float:
        return 1.0 / self.eval_cost(1, context).seconds


def profile(name: str) -> DeviceProfile:
    if name not in PROFILES:
        raise EdgespecError(f"unknown device profile {name!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]
