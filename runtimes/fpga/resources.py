"""What a TLMM design takes of an FPGA's fabric, and whether it fits the board.

Every rate of a `Design` is hardware: a lookup per cycle is a lane (a table read
and an accumulator), an addition per cycle is an adder building tables, an
attention multiply-add per cycle is half a DSP slice. Unit costs are those of AMD
UltraScale+ primitives; each is an assumption, written where it is used:

- a lane reads one of E table entries of b bits: an E:1 multiplexer per bit from
  LUT6s (a 4:1 multiplexer each; the MUXF7/F8 that join them are free), so
  ceil(E / 4) LUTs a bit; it then adds or subtracts the entry into its
  accumulator, one LUT a bit on the carry chain (the sign rides on the carry-in);
- a table adder: one LUT a bit;
- two int8 multiply-adds per DSP48E2 (AMD white paper WP487's packing);
- the weight codes stream through a double buffer as wide as the lanes consume
  them, in BRAM36 (72 bits a port);
- one prefill tile's activations (tile tokens x the widest layer input, int8) sit
  in URAM (288 Kb a block), double-buffered so one layer reads while the next writes.

Not counted: AXI DMA, control, and the norm/softmax/rotary units, which are small
beside the lanes but not nothing; utilization is a lower bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgespec.runtimes.fpga.tlmm import code_bits, patterns

BRAM_PORT_BITS = 72  # a BRAM36 in its widest mode: 512 x 72
URAM_BITS = 288 * 1024  # a URAM288 block
INT8_MACS_PER_DSP = 2  # WP487: two int8 products sharing one multiplier


@dataclass(frozen=True)
class Resources:
    used: dict[str, int]
    available: dict[str, int]

    def utilization(self) -> dict[str, float]:
        return {k: self.used[k] / self.available[k] for k in self.used}

    @property
    def fits(self) -> bool:
        return all(u <= 1.0 for u in self.utilization().values())

    def summary(self) -> str:
        return ", ".join(f"{k} {self.used[k]:,}/{self.available[k]:,} ({u:.0%})"
                         for k, u in self.utilization().items())


def entry_bits(g: int) -> int:
    """A table entry: the signed sum of up to G int8 activations."""
    return (127 * g).bit_length() + 1


def lane_luts(g: int, n_in: int) -> int:
    """One lookup lane: the entry multiplexer plus an accumulator wide enough for n_in inputs."""
    acc_bits = (127 * n_in).bit_length() + 1
    return entry_bits(g) * math.ceil(len(patterns(g)) / 4) + acc_bits


def widest_input(shape) -> int:
    """The longest input of the shape's linear layers: it sizes accumulators and the activation tile."""
    return max(n_in for _, n_in in shape.linears())


def adder_luts(design) -> int:
    """The table builders: one adder per addition a cycle, one LUT a bit."""
    return math.ceil(design.adds_per_cycle) * entry_bits(design.g)


def design_resources(board, design, shape) -> Resources:
    """LUT, DSP, BRAM36 and URAM the design's rates take on `board`, for `shape`'s widest layer."""
    widest = widest_input(shape)
    lanes = math.ceil(design.lookups_per_cycle)
    luts = lanes * lane_luts(design.g, widest) + adder_luts(design)
    dsp = math.ceil(design.attn_macs_per_cycle / INT8_MACS_PER_DSP)
    bram = 2 * math.ceil(lanes * code_bits(design.g) / BRAM_PORT_BITS)
    uram = 2 * math.ceil(design.tile_tokens * widest * 8 / URAM_BITS)
    return Resources(used={"LUT": luts, "DSP": dsp, "BRAM36": bram, "URAM": uram},
                     available={"LUT": board.lut, "DSP": board.dsp, "BRAM36": board.bram_36k, "URAM": board.uram})


def max_lookups_per_cycle(board, design, shape) -> int:
    """The most lanes the board holds beside the design's table adders: LUTs for the
    lanes, BRAM for the weight stream that feeds them."""
    by_lut = (board.lut - adder_luts(design)) // lane_luts(design.g, widest_input(shape))
    by_bram = board.bram_36k // 2 * BRAM_PORT_BITS // code_bits(design.g)
    return max(min(by_lut, by_bram), 0)
