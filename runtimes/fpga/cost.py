"""A cycle, bandwidth and energy model of a TLMM accelerator on an edge FPGA.

What one `eval` of n tokens at context position p costs on the board:

- every ternary linear layer streams its packed weights from DDR once per call,
  whatever n (the weights are shared by the n tokens: why verifying k draft
  tokens costs about as much as one token while the call is bandwidth-bound);
- its TLMM engine does n * out * groups lookups at `lookups_per_cycle`, after
  building each token's table (n * groups * entries additions at `adds_per_cycle`);
- a layer takes the longer of its weight stream and its compute (double-buffered);
- attention reads the KV cache (p + n positions) once per call and does
  n * (p + n) * d multiply-adds at `attn_macs_per_cycle`;
- the LM head runs on the board's CPU (TeLLMe does it with NEON on the ARM cores)
  at `cpu_flops`, reading its int8 weights once per call;
- a call longer than the design's on-chip tile streams the weights once per tile.

What the design takes of the fabric (lanes, adders, DSPs, buffers) is
fpga_resources.py's; a design the board cannot hold is refused.

Energy is the board's power times time. The numbers of a `Board` are datasheet
figures; those of a `Design` are the accelerator's, and where a paper does not
publish them they are calibrated, which the profile says (see docs/fpga.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from edgespec.errors import EdgespecError
from edgespec.runtimes.fpga.resources import design_resources, max_lookups_per_cycle
from edgespec.runtimes.fpga.tlmm import code_bits, patterns


@dataclass(frozen=True)
class Board:
    name: str
    clock_hz: float  # accelerator clock
    ddr_bytes_per_s: float  # what the accelerator's ports achieve, not the DRAM's peak
    power_w: float
    cpu_flops: float  # the SoC's CPU, for the LM head
    dsp: int
    lut: int
    bram_36k: int
    uram: int
    note: str = ""


@dataclass(frozen=True)
class Design:
    g: int  # activations per TLMM group
    lookups_per_cycle: float
    adds_per_cycle: float  # table construction
    attn_macs_per_cycle: float
    kv_bytes: int = 1  # int8 KV cache
    lm_head_bytes: int = 1  # int8 LM head on the CPU
    tile_tokens: int = 128  # the most tokens whose activations stay on chip: a longer call is tiled
    note: str = ""


@dataclass(frozen=True)
class Shape:
    """What the cost depends on: the linear layers of one block, and the rest."""

    name: str
    n_layer: int
    d: int
    d_ff: int
    n_head: int
    n_kv_head: int
    vocab: int
    gated_ffn: bool = True  # SwiGLU: gate and up

    @property
    def d_kv(self) -> int:
        return self.d // self.n_head * self.n_kv_head

    def linears(self) -> list[tuple[int, int]]:
        """(out, in) of each ternary linear layer in one block."""
        ffn = [(self.d_ff, self.d)] * (2 if self.gated_ffn else 1) + [(self.d, self.d_ff)]
        return [(self.d, self.d), (self.d_kv, self.d), (self.d_kv, self.d), (self.d, self.d), *ffn]


@dataclass
class Cost:
    seconds: float
    bound: str  # what limited the linear layers: "bandwidth" or "compute"


class DesignDoesNotFit(EdgespecError, ValueError):
    """A user-facing refusal: the CLI prints it as one line."""


class CostModel:
    def __init__(self, board: Board, design: Design, shape: Shape) -> None:
        """Refuses a design whose rates the board's fabric cannot hold (fpga_resources)."""
        self.board, self.design, self.shape = board, design, shape
        self.resources = design_resources(board, design, shape)
        if not self.resources.fits:
            over = [k for k, u in self.resources.utilization().items() if u > 1]
            raise DesignDoesNotFit(f"the design does not fit the {board.name}: needs more {', '.join(over)} than it has "
                                   f"({self.resources.summary()})")
        self._entries = len(patterns(design.g))
        self._code_bits = code_bits(design.g)

    def eval_cost(self, n: int, n_past: int, n_logits: int | None = None) -> Cost:
        """Seconds for one call evaluating n tokens after n_past cached ones, with
        logits for the last n_logits of them (all by default; a prefill needs one)."""
        n_logits = n if n_logits is None else n_logits
        b, dz, s = self.board, self.design, self.shape
        clock = b.clock_hz
        linear_s, compute_bound = 0.0, 0
        for out, n_in in s.linears():
            groups = -(-n_in // dz.g)
            wbytes = out * groups * self._code_bits / 8
            stream = wbytes / b.ddr_bytes_per_s * -(-n // dz.tile_tokens)  # weights stream again for each tile
            compute = (n * out * groups / dz.lookups_per_cycle + n * groups * self._entries / dz.adds_per_cycle) / clock
            linear_s += max(stream, compute)
            compute_bound += compute > stream
        ctx = n_past + n
        kv_bytes = 2 * ctx * s.d_kv * dz.kv_bytes
        attn = max(kv_bytes / b.ddr_bytes_per_s, n * ctx * s.d / dz.attn_macs_per_cycle / clock)
        per_layer = linear_s + attn
        head = max(s.vocab * s.d * dz.lm_head_bytes / b.ddr_bytes_per_s, 2 * n_logits * s.vocab * s.d / b.cpu_flops)
        bound = "compute" if compute_bound > len(s.linears()) / 2 else "bandwidth"
        return Cost(s.n_layer * per_layer + head, bound)

    def prefill_seconds(self, n_prompt: int) -> float:
        """Time to first token: the prompt in one call."""
        return self.eval_cost(n_prompt, 0, n_logits=1).seconds

    def decode_tokens_per_s(self, context: int) -> float:
        return 1.0 / self.eval_cost(1, context).seconds


# AMD Kria KV260 (Zynq UltraScale+ XCK26): resources from AMD's datasheet (DS987).
# The DDR4 is 64-bit at 2400 MT/s, 19.2 GB/s peak; the PL reaches it through HP
# ports, and `ddr_bytes_per_s` is what TeLLMe's own decode rate implies the design
# sustains (calibrated: see docs/fpga.md). Power: the paper's 5 W budget.
KV260 = Board("kv260", clock_hz=250e6, ddr_bytes_per_s=5.0e9, power_w=5.0, cpu_flops=16e9,
              dsp=1248, lut=117_120, bram_36k=144, uram=64,
              note="XCK26 datasheet resources; 250 MHz, 5.0 GB/s sustained and 16 GFLOP/s on the ARM cores are assumptions calibrated to TeLLMe v2")

# TeLLMe v2's design, as far as the paper's abstract states it (G-grouped TLMM, 1.58-bit
# weights, 8-bit activations); lookup and attention rates are calibrated on its 64-token
# time-to-first-token, the 128-token figure is then predicted.
TELLME = Design(g=3, lookups_per_cycle=128, adds_per_cycle=512, attn_macs_per_cycle=256,
                note="lookups_per_cycle calibrated on TeLLMe v2's 0.45 s TTFT for 64 tokens")

# the model TeLLMe runs: BitNet b1.58 "large" (1bitLLM/bitnet_b1_58-large, 0.73B)
BITNET_0_73B = Shape("bitnet-b1.58-0.73b", n_layer=24, d=1536, d_ff=4096, n_head=16, n_kv_head=16, vocab=32002)

# published figures the model is checked against (TeLLMe v2, arXiv 2510.15926, abstract)
TELLME_PUBLISHED = {"decode_tokens_per_s": 25.0, "ttft_64_s": 0.45, "ttft_128_s": 0.96, "power_w": 5.0}


def tellme_cost_model() -> CostModel:
    """TeLLMe v2's configuration: its model on the KV260 with its TLMM design."""
    return CostModel(KV260, TELLME, BITNET_0_73B)


def widest_cost_model(board: Board, design: Design, shape: Shape) -> tuple[CostModel, str]:
    """The design with as many TLMM lanes as the board holds (fpga_resources), and the
    resource that stops it."""
    lanes = max_lookups_per_cycle(board, design, shape)
    if lanes < 1:
        raise DesignDoesNotFit(f"not one TLMM lane fits the {board.name} beside the design's table adders")
    model = CostModel(board, replace(design, lookups_per_cycle=lanes), shape)
    use = model.resources.utilization()
    return model, max(use, key=use.get)
