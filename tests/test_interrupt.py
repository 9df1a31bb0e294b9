"""Ctrl-C stops work cleanly: no traceback, a clear exit, and the chat goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

STORY = "Write a very long story about a lighthouse keeper, chapter by chapter."


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
