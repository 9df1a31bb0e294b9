"""The batch-cost curves a bench prices its oracle and replay rows at, timed during the run.

One timing of a curve is one moment's: on the 2-core machines here a batch's cost in units
of one token can be a quarter off at another moment of the same hour (docs/design.md), and
the oracle bound moves with it. So each runtime's curve is timed after every category's last
prompt, and each batch size is priced at the median of its timings: the curve of the whole
run, not of its last half minute. The timing runs on the runtime's plain engine, which drafts nothing,
so re-timing its curve changes no method's decoding.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from rich.console import Console


class _Timed(Protocol):
    def time_curve(self) -> dict[int, float]: ...


class BatchCurves:
    """Curves by the prefix of a runtime's rows ("" for llama.cpp on the CPU, "onnx:", "gpu:")."""

    def __init__(self, engines: dict[str, _Timed]) -> None:
        self.engines = engines
        self.timings: list[dict[str, dict[int, float]]] = []

    def time(self) -> None:
        """Every runtime's curve, once more (seconds by batch size)."""
        self.timings.append({prefix: e.time_curve() for prefix, e in self.engines.items()})

    def medians(self) -> dict[str, dict[int, float]]:
        """Each runtime's median seconds per batch size over the timings so far."""
        out = {}
        for prefix in self.engines:
            curves = [t[prefix] for t in self.timings]
            sizes = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
            out[prefix] = {n: float(np.median([c[n] for c in curves])) for n in sizes}
        return out

    def print(self, console: Console) -> dict[str, dict[int, float]]:
        """Says each median curve, in units of one token, with how far two tokens moved between timings."""
        medians = self.medians()
        for prefix, cost in medians.items():
            if not cost:
                continue
            twos = [t[prefix][2] / t[prefix][1] for t in self.timings if 2 in t[prefix]]
            spread = f"; 2 tokens {min(twos):.2f}-{max(twos):.2f} across timings" if len(twos) > 1 else ""
            label = prefix.removesuffix(":") + " " if prefix else ""
            count = f"{len(self.timings)} timing" + "s" * (len(self.timings) > 1)
            units = ", ".join(f"{n}: {t / cost[1]:.2f}" for n, t in cost.items())
            console.print(f"{label}batch cost timed after each category ({count}, median per size), in units of one "
                          f"token: {units}{spread}", highlight=False)
        return medians
