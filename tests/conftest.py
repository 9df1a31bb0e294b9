"""Shared fixtures: tiny synthetic backends, and the smallest real model."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from edgespec.runtimes.reference import ByteTokenizer, ReferenceBackend, ReferenceModel
from edgespec.spec import calibration
from edgespec.spec.backend import Backend
from edgespec.spec.controller import DraftController


class ScriptedBackend(Backend):
    """A 'model' that greedily emits a fixed byte string, then EOS: for testing
    streaming, stopping and cancellation without a real model."""

    name = "scripted"

    def __init__(self, text: str, n_ctx: int = 4096) -> None:
        self.tokenizer = ByteTokenizer()
        self.script = list(text.encode("utf-8")) + [ByteTokenizer.EOS]
        self.n_ctx = n_ctx
        self._n_past = 0
        self._prompt_len: int | None = None

    @property
    def n_past(self) -> int:
        return self._n_past

    def eval(self, ids: Sequence[int], n_logits: int | None = None) -> np.ndarray:
        if self._prompt_len is None or self._n_past < self._prompt_len:
            self._prompt_len = self._n_past + len(ids)
        rows = []
        for _ in ids:
            self._n_past += 1
            i = self._n_past - self._prompt_len  # tokens generated after this position
            row = np.zeros(self.tokenizer.n_vocab, dtype=np.float32)
            row[self.script[min(max(i, 0), len(self.script) - 1)]] = 10.0
            rows.append(row)
        n_logits = len(ids) if n_logits is None else n_logits
        return np.array(rows[len(rows) - n_logits :])

    def rollback(self, n_past: int) -> None:
        self._n_past = n_past
        if self._prompt_len is not None and n_past < self._prompt_len:
            self._prompt_len = None

    def memory(self) -> dict[str, int]:
        return {}


def always_draft(max_k: int = 8) -> DraftController:
    """A controller that believes verification is free, so every proposal is
    verified in full: the strictest exercise of the verifier and rollback."""
    c = DraftController(max_k=max_k)
    c.cost.set_timed({n: 1.0 for n in range(1, max_k + 2)})
    c.cost.alpha = 0.0  # the engine's real timings must not change that belief
    return c


@pytest.fixture
def reference_backend() -> ReferenceBackend:
    return ReferenceBackend(ReferenceModel(seed=0))


@pytest.fixture(scope="session")
def smollm2_path():
    """The real SmolLM2-135M GGUF from the model store (fetched and verified once)."""
    from edgespec.models.store import resolve

    return resolve("smollm2-135m", quiet=True)


# -- tiers: `pytest -m "not real_model and not export and not gpu and not slow"` is the fast one --

FILE_MARKS = {"test_export.py": "export", "test_vulkan.py": "gpu", "test_devices.py": "gpu"}


def pytest_configure(config):
    """What the tests measure and learn (batch-cost curves, acceptance, drafter steps) is kept
    in a folder of the run's own, removed at its end: the curves of the many models tests
    build in temporary folders would otherwise pile up in the user's cache, and a test would
    start from whatever earlier runs on the machine left there."""
    if calibration.CALIBRATION_ENV not in os.environ:
        config.edgespec_calibration = Path(tempfile.mkdtemp(prefix="edgespec-test-calibration-"))
        os.environ[calibration.CALIBRATION_ENV] = str(config.edgespec_calibration)


def pytest_unconfigure(config):
    own = getattr(config, "edgespec_calibration", None)
    if own is not None:
        os.environ.pop(calibration.CALIBRATION_ENV, None)
        shutil.rmtree(own, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Marks that hold whatever a test's author remembered: a test that asks for the real
    model (directly or through another fixture) is `real_model`; whole files of export or
    GPU tests carry their mark."""
    for item in items:
        if "smollm2_path" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_model)
        mark = FILE_MARKS.get(item.path.name)
        if mark:
            item.add_marker(getattr(pytest.mark, mark))
