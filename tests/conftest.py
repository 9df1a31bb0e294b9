"""Shared fixtures (a reference backend, the smallest real model), a store of measurements
of its own for the test run, and the test tiers."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel
from edgespec.speculative import calibration


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
