"""A first load of a GGUF file in a child process, where a crash costs nothing.

The rules of gguf_semantics cover the assertions we know of; llama.cpp has more,
in code paths per architecture and tokenizer. So before a file is loaded in the
user's process (a chat, a desktop app, the server), a child loads it, tokenizes
every byte value and a line of mixed-script text, detokenizes, and decodes one
token. A child that dies or fails is one line of refusal. The verdict depends
only on what the file declares, so the store caches it under header_digest and
pays for it once per file.

Run as `python -m edgespec.models.gguf_probe FILE`: exit 0 when the file works.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

PROBE_TIMEOUT_S = 300.0  # a large model on a busy machine; a hang is refused, not cached
CANNOT_PROBE = 3  # the child's exit code when llama.cpp itself cannot be loaded here


class ProbeUnavailable(Exception):
    """The probe could not run here (no llama.cpp in this environment, or too slow): no verdict
    on the file, so nothing is kept."""
MIXED_SCRIPT = "Hello, мир! 你好 🌍 ∑x²≤1 — café\tnaïve ünïcödé\n\x00\x7f"


def header_digest(path: Path, header_bytes: int) -> str:
    """sha256 of the file's size and everything before its tensor data: its metadata,
    vocabulary and tensor table. An edit there is a new file, whatever its mtime."""
    h = hashlib.sha256(str(path.stat().st_size).encode())
    with open(path, "rb") as f:
        remaining = header_bytes
        while remaining > 0 and (chunk := f.read(min(remaining, 1 << 20))):
            h.update(chunk)
            remaining -= len(chunk)
    return h.hexdigest()


def child_env() -> dict[str, str]:
    """This process's environment, less ggml's backtrace on a crash: it attaches a debugger
    (a second or more) to print what nobody reads."""
    return {**os.environ, "GGML_NO_BACKTRACE": "1"}


def probe(path: Path) -> str | None:
    """None when llama.cpp loads and runs `path` in a child; else why not, in one line."""
    try:
        r = subprocess.run([sys.executable, "-m", "edgespec.models.gguf_probe", str(path)],
                           capture_output=True, text=True, errors="replace", timeout=PROBE_TIMEOUT_S, env=child_env())
    except subprocess.TimeoutExpired:
        raise ProbeUnavailable(f"llama.cpp took over {PROBE_TIMEOUT_S:.0f} s to load {path}") from None
    if r.returncode == 0:
        return None
    said = _last_words(r.stderr)
    if r.returncode == CANNOT_PROBE:
        raise ProbeUnavailable(f"cannot check {path}: llama-cpp-python does not load in {sys.executable} ({said})")
    if r.returncode < 0:
        try:
            name = signal.Signals(-r.returncode).name
        except ValueError:
            name = f"signal {-r.returncode}"
        return f"llama.cpp crashes on {path} ({name}{': ' + said if said else ''})"
    return f"llama.cpp cannot use {path}{': ' + said if said else ''}"


def _last_words(stderr: str) -> str:
    """The line of a child's stderr that says what went wrong: an assertion, an exception."""
    lines = [x.strip() for x in stderr.splitlines() if x.strip()]
    for marker in ("GGML_ASSERT", "what():", "Error", "error"):
        hits = [x for x in lines if marker in x]
        if hits:
            return re.sub(r"^\S*/", "", hits[-1])[:200]  # a build path says nothing to the user
    return lines[-1][:200] if lines else ""


def _main(path: str) -> None:
    from llama_cpp import Llama

    # verbose: llama.cpp's log is how the parent learns which assertion failed
    model = Llama(path, n_ctx=64, n_batch=64, n_threads=1, n_gpu_layers=0, verbose=True)
    for b in range(256):
        model.tokenize(bytes([b]), add_bos=False, special=False)
    ids = model.tokenize(MIXED_SCRIPT.encode(), add_bos=True, special=True)
    model.detokenize(ids)
    model.eval(ids[:1])


if __name__ == "__main__":
    try:
        import llama_cpp  # noqa: F401
    except Exception as e:  # this environment's fault, not the file's
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(CANNOT_PROBE)
    try:
        _main(sys.argv[1])
    except Exception as e:  # the parent reports it in one line
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
