"""Measured costs, kept on disk per model, build, threads and machine.

The batch-cost curve is a property of the machine and build, not of the
conversation: what decoding learned of it is kept, and the next process starts
from it and refines it. A model drafter's step (one drafted token, as generation
measured it) is kept the same way, so the memory planner can weigh drafters by
what they cost here before loading any; and so is each kind's greedy acceptance
against a target, which the next process's controller starts from.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import platformdirs

from edgespec.files import write_json
from edgespec.speculative.acceptance import acceptance_counts
from edgespec.speculative.cost_curve import CostModel


CURVE_FORMAT = 2  # a curve kept in another format is learned again
DRAFTER_STEP = "drafter-step|"  # prefixes a drafter backend's cost key for its step cost
MIN_STEPS = 16  # drafted tokens before a drafter's mean cost is worth keeping
CALIBRATION_ENV = "EDGESPEC_CALIBRATION"


@contextmanager
def temporary_store() -> Iterator[Path]:
    """Measurements kept in an empty folder of their own, removed after: a run that starts
    as a new machine would, leaving the user's own store as it was. Processes started
    meanwhile inherit it."""
    before = os.environ.get(CALIBRATION_ENV)
    with tempfile.TemporaryDirectory(prefix="edgespec-fresh-") as tmp:
        os.environ[CALIBRATION_ENV] = tmp
        try:
            yield Path(tmp)
        finally:
            if before is None:
                os.environ.pop(CALIBRATION_ENV, None)
            else:
                os.environ[CALIBRATION_ENV] = before


def kept_for(path: str | os.PathLike, threads: int | None) -> dict[str, int]:
    """What the store holds for a model file now: the batch sizes of its latest curve on this
    machine (any thread count, `threads` first) and the kinds of draft whose acceptance is kept."""
    try:
        prefix = model_prefix(path)
    except OSError:
        return {"curve_sizes": 0, "acceptance_kinds": 0}
    curve = (latest(f"{prefix}{threads}|") if threads else None) or latest(prefix) or {}
    return {"curve_sizes": len(curve), "acceptance_kinds": len(load_kinds(path, []))}


def _dir() -> Path:
    """Where measurements are kept: $EDGESPEC_CALIBRATION, else the user's cache dir."""
    env = os.environ.get(CALIBRATION_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("edgespec")) / "calibration"


def _path(key: str) -> Path:
    return _dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def model_prefix(path: str | os.PathLike) -> str:
    """How a backend's cost key starts for this model file (see LlamaCppBackend.cost_key)."""
    p = Path(path).resolve()
    st = p.stat()
    return f"{p}|{st.st_size}|{st.st_mtime_ns}|"


def latest(prefix: str, device: str = "CPU") -> dict[int, float] | None:
    """Seconds per batch size of the most recent measurement on this machine whose key starts
    with `prefix` (whatever threads, micro-batch or KV cache type it ran with), on `device`."""
    found: tuple[float, dict] | None = None
    for p in _dir().glob("*.json"):  # nothing when the folder does not exist
        try:
            data = json.loads(p.read_text())
            key = str(data["key"])
            parts = key.split("|")
            if (key.startswith(prefix) and platform.node() in parts and device in parts
                    and data.get("format") == CURVE_FORMAT):
                mtime = p.stat().st_mtime
                if found is None or mtime > found[0]:
                    found = (mtime, data["seconds"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return {int(n): float(s) for n, s in found[1].items()} if found else None


def save_drafter_steps(steps: Iterable[tuple[Any, tuple[int, float]]]) -> None:
    """Keep what one drafted token costs each model drafter under its backend's cost key,
    from (ModelCost, (drafted tokens, their seconds)) pairs (see ModelCost.token_cost)."""
    for c, (n, seconds) in steps:
        if n < MIN_STEPS:
            continue
        try:
            key = c.backend.cost_key()
        except OSError:  # the model file went away: nothing to key the measurement by
            continue
        if key is not None:
            _write(DRAFTER_STEP + key, {1: seconds / n})


ACCEPTANCE = "acceptance|"  # prefixes "target prefix || drafter prefix" for a pair's greedy acceptance
ACCEPT_WINDOW = 4096  # drafted tokens kept per pair: past it the older half is dropped, so it follows the model files


def _pair_key(target: str | os.PathLike, drafter: str | os.PathLike) -> str:
    return f"{ACCEPTANCE}{model_prefix(target)}|{model_prefix(drafter)}"


def save_acceptance(target: str | os.PathLike, models: Iterable, by_key: dict[str, list[int]]) -> None:
    """Add one greedy generation's drafted and accepted tokens (GenerationStats.by_key) to
    each model drafter's (ModelCost's) running count against this target: what the planner
    expects of the pair next time instead of its prior."""
    for c in models:
        drafted, accepted = by_key.get(c.kind.family, (0, 0))
        path = c.backend.path
        if drafted < MIN_STEPS or path is None:
            continue
        try:
            key = _pair_key(target, path)
        except OSError:  # a model file went away: nothing to key the count by
            continue
        old = _read_counts(key) or (0, 0)
        total = [old[0] + drafted, old[1] + accepted]
        if total[0] > ACCEPT_WINDOW:
            total = [total[0] // 2, total[1] // 2]
        _write_json(key, {"key": key, "drafted": total[0], "accepted": total[1]})


def acceptance(target: str | os.PathLike, drafter: str | os.PathLike, minimum: int = MIN_STEPS
               ) -> tuple[int, int] | None:
    """(drafted, accepted) greedy tokens of this drafter model against this target, kept by
    earlier generations on this machine; None with fewer than `minimum` drafted."""
    found = _read_counts(_pair_key(target, drafter))
    return found if found and found[0] >= max(1, minimum) else None


KINDS = "kinds|"  # prefixes a target's model prefix for the controller's per-kind greedy acceptance


def _stored_names(models: Iterable) -> dict[str, str]:
    """A model drafter's kind ("model", "xvocab") is kept per drafter model file: what one
    drafter model learned says nothing of another's."""
    return {str(c.kind): f"{c.kind}|{model_prefix(c.backend.path)}" for c in models if c.backend.path is not None}


def save_kinds(target: str | os.PathLike, models: Iterable, counts: dict[str, list]) -> None:
    """Add one greedy generation's AcceptanceModel.take_counts() to the long-run counts kept
    for this target, which the next process starts from (AcceptanceModel.seed). Past
    ACCEPT_WINDOW tries at a kind's first position its older half is dropped."""
    if not counts:  # nothing drafted: the kept counts stand as they are
        return
    models = list(models)
    try:
        key = KINDS + model_prefix(target)
        names = _stored_names(models)
    except OSError:  # a model file went away: nothing to key it by
        return
    model_kinds = {str(c.kind) for c in models}
    kept = _read_kinds(key)
    for kind, (acc, tries) in counts.items():
        if kind in model_kinds and kind not in names:
            continue  # a model drafter with no file to tell it by
        name = names.get(kind, kind)
        new = np.array([acc, tries], dtype=float)  # take_counts() wrote them: well formed
        old = acceptance_counts(kept.get(name, [[], []]))
        if old is None:  # not counts this code wrote: start again
            old = np.zeros((2, 0))
        n = max(old.shape[1], new.shape[1])
        total = np.pad(old, ((0, 0), (0, n - old.shape[1]))) + np.pad(new, ((0, 0), (0, n - new.shape[1])))
        if total[1][0] > ACCEPT_WINDOW:
            total = total / 2
        kept[name] = total.tolist()
    _write_json(key, {"key": key, "kinds": kept})


def load_kinds(target: str | os.PathLike, models: Iterable) -> dict[str, list]:
    """The counts save_kinds kept for this target, by the names of the controller's kinds
    for these model drafters (ModelCost) and the model-free ones."""
    try:
        key = KINDS + model_prefix(target)
        mine = {stored: k for k, stored in _stored_names(models).items()}
    except OSError:
        return {}
    return {mine.get(stored, stored): ev for stored, ev in _read_kinds(key).items()
            if "|" not in stored or stored in mine}


def _read(key: str) -> dict:
    """The cache entry written under `key`; empty if there is none, or it is corrupt or another key's."""
    try:
        data = json.loads(_path(key).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("key") == key else {}


def _read_kinds(key: str) -> dict[str, list]:
    try:
        return dict(_read(key).get("kinds", {}))
    except (TypeError, ValueError):
        return {}


def _read_counts(key: str) -> tuple[int, int] | None:
    data = _read(key)
    try:
        return (int(data["drafted"]), int(data["accepted"])) if data else None
    except (KeyError, TypeError, ValueError):
        return None


def load(key: str | None, cost: CostModel) -> bool:
    """Fill `cost` from the cache; False if there is nothing usable."""
    if key is None:
        return False
    data = _read(key)
    if data.get("format") != CURVE_FORMAT:
        return False
    try:
        seconds = {int(n): float(s) for n, s in data["seconds"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
    if not plausible(seconds):
        return False
    cost.set_timed(seconds)
    return cost.calibrated


def plausible(seconds: dict[int, float]) -> bool:
    """A batch costs at least about what one token does (the weights are read once
    either way): a curve with a batch under half of that was timed while something
    else took the cores, and drafting by it would lose."""
    one = seconds.get(1)
    return bool(one) and all(s >= 0.5 * one for s in seconds.values())


def save(key: str | None, cost: CostModel) -> None:
    if key is None:
        return
    if plausible(cost.measured):
        _write(key, cost.measured)
    else:
        forget(key)


def forget(key: str | None) -> None:
    if key is not None:
        _path(key).unlink(missing_ok=True)


def _write(key: str, seconds: dict[int, float]) -> None:
    _write_json(key, {"key": key, "format": CURVE_FORMAT, "seconds": {str(n): s for n, s in seconds.items()}})


def _write_json(key: str, data: dict) -> None:
    write_json(_path(key), data)  # when the cache is not writable: measured again next time
