"""The bench's methods each run in a process of their own (bench/worker.py): one that dies
says how, in one line."""

import os
import signal

import pytest

from edgespec.bench.worker import MethodSpec, Worker
from edgespec.errors import EdgespecError


@pytest.mark.real_model
def test_a_method_killed_outright_says_memory_may_have_run_out(smollm2_path):
    worker = Worker("plain", MethodSpec(str(smollm2_path), ctx=256, threads=1))
    try:
        os.kill(worker.pid, signal.SIGKILL)  # what the out-of-memory killer does
        with pytest.raises(EdgespecError, match="plain process was killed \\(out of memory\\?.*run fewer methods"):
            worker.run([1, 2, 3], 4)
    finally:
        worker.close()
