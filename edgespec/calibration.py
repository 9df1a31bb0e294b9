"""Measured batch costs, kept on disk per model, build, threads and machine.

Timing every batch size from 1 to 17 takes a few seconds on a 1.5B model; the
curve is a property of the machine and build, not of the conversation, so it is
measured once and refined online by the controller after that.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import platformdirs

from .controller import CostModel


def _path(key: str) -> Path:
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return Path(platformdirs.user_cache_dir("edgespec")) / "calibration" / f"{digest}.json"


def load(key: str | None, cost: CostModel) -> bool:
    """Fill `cost` from the cache; False if there is nothing usable."""
    if key is None:
        return False
    try:
        data = json.loads(_path(key).read_text())
        if data.get("key") != key:
            return False
        for n, seconds in data["seconds"].items():
            cost.observe(int(n), float(seconds))
        return cost.calibrated
    except (OSError, ValueError, KeyError, TypeError):
        return False


def save(key: str | None, cost: CostModel) -> None:
    if key is None:
        return
    p = _path(key)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "seconds": {str(n): s for n, s in cost.measured.items()}}))
        tmp.replace(p)
    except OSError:
        pass  # measured again next time
