"""What a bench row is: its name, the row it is compared with, whose engine timed it.

Made once, where the bench starts the method or prices the row; tables and comparisons read
these fields instead of a row's name. A peer's speculation compares with the peer's own plain
(another process, the same kernels), an edgespec row with its own runtime's or device's plain
(gpu:plain for gpu:lookup, onnx:plain for onnx:auto).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from edgespec.bench import forced as forced_rows
from edgespec.bench.common import LCP, Run

PLAIN = "plain"
LCP_LOOKUP = "llama-cpp-python-lookup"
ORACLE = "oracle:lookup"
REPLAY = "replay:"


@dataclass(frozen=True)
class Method:
    name: str
    plain: str  # the row it is compared with; its own name for a plain row
    run: Callable[..., Run] | None = field(default=None, compare=False, repr=False)  # None: priced, not timed
    runtime: str | None = None  # edgespec's rows: their runtime's prefix ("" llama.cpp on the CPU, "onnx:", "gpu:")
    peer: str | None = None  # a peer program's rows: which (llama_server.NAME, LCP, "hf")
    forced: int = 0  # a forced row's draft length (forced.py)

    @property
    def is_plain(self) -> bool:
        return self.plain == self.name

    @property
    def edgespec(self) -> bool:
        """Timed in edgespec's own engine (its overhead per token is measured)."""
        return self.runtime is not None

    @property
    def drafting(self) -> bool:
        """One of edgespec's drafters, timed: what the peers' best is compared with."""
        return self.edgespec and not self.is_plain

    @property
    def runtime_label(self) -> str | None:
        """Which runtime an edgespec row ran on, as the tables say it."""
        return None if self.runtime is None else (self.runtime.removesuffix(":") or "llama.cpp")


def edgespec_method(label: str, run: Callable[..., Run], runtime: str = "", forced: int = 0) -> Method:
    """Plain decoding (`label` "plain") or a drafter's row on one of edgespec's runtimes."""
    name = runtime + (forced_rows.label(label, forced) if forced else label)
    return Method(name, runtime + PLAIN, run, runtime=runtime, forced=forced)


def peer_method(name: str, plain: str, run: Callable[..., Run], peer: str) -> Method:
    return Method(name, plain, run, peer=peer)


def priced_method(name: str) -> Method:
    """A row priced at the run's batch costs, not timed (the oracle, a replay)."""
    return Method(name, PLAIN)


def lcp_methods(plain: Callable[..., Run], lookup: Callable[..., Run]) -> list[Method]:
    """llama-cpp-python's own generation, plain and with its prompt lookup."""
    return [peer_method(LCP, PLAIN, plain, LCP), peer_method(LCP_LOOKUP, LCP, lookup, LCP)]
