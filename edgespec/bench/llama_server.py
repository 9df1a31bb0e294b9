"""llama-server as a peer in `edgespec bench`: llama.cpp's own server, built from the
same llama.cpp source and CPU flags as the llama-cpp-python edgespec runs on
(`./install.sh --dev`), decoding the same prompt token ids on loopback with the same
attention kernels as edgespec's backend: llama-server turns flash attention on by default,
which breaks near-ties differently and so writes other greedy answers to some prompts, and
the ratios would compare texts rather than methods (docs/benchmarks.md).

Each configuration is one server process (plain, each `--spec-type` n-gram mode, and
`-md DRAFT` for a same-vocabulary drafter model), started once and kept for the whole
bench so its runs interleave with edgespec's prompt by prompt. Speeds are the server's
own `timings` (decoding only, as the bench's other rows), and every server is stopped
however the bench ends.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

import platformdirs

from edgespec.errors import EdgespecError

NAME = "llama-server"
SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 600.0


def binary() -> Path | None:
    """$EDGESPEC_LLAMA_SERVER, else the build install.sh cached for this machine, else PATH's."""
    env = os.environ.get("EDGESPEC_LLAMA_SERVER")
    if env:
        return Path(env) if Path(env).is_file() else None
    cached = Path(os.environ.get("EDGESPEC_SERVER_CACHE") or Path(platformdirs.user_cache_dir("edgespec")) / NAME)
    if (cached / NAME).is_file():
        return (cached / NAME).resolve()
    found = shutil.which(NAME)
    return Path(found) if found else None


def configurations(draft_models: dict[str, Path]) -> dict[str, list[str]]:
    """Row name -> the server's speculation arguments: plain, every n-gram type, and each
    drafter model (`label` -> its file) as `-md`."""
    out: dict[str, list[str]] = {NAME: []}
    out.update({f"{NAME}:{t}": ["--spec-type", t] for t in SPEC_TYPES})
    out.update({f"{NAME}:{label}": ["-md", str(path)] for label, path in draft_models.items()})
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One llama-server process on loopback; `run(ids, max_tokens)` decodes greedily."""

    def __init__(self, exe: Path, model: Path, ctx: int, threads: int, spec: list[str],
                 flash_attn: bool = False, label: str = NAME) -> None:
        self.label, self.port = label, _free_port()
        # its output, for the last line an error quotes; removed when it stops
        fd, log = tempfile.mkstemp(prefix="edgespec-llama-server-", suffix=".log")
        os.close(fd)
        self.log = Path(log)
        run = ["-c", str(ctx), "-t", str(threads), "-tb", str(threads), "-np", "1", "--no-webui",
               "-fa", "on" if flash_attn else "off", *spec]
        if "-md" in spec:  # the drafter on the same threads
            run += ["-td", str(threads), "-tbd", str(threads)]
        args = [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port), *run]
        # how it ran, for a record: model files by name, without this run's loopback port
        drafter = spec[spec.index("-md") + 1] if "-md" in spec else None
        self.command = shlex.join([NAME, "-m", model.name, *(Path(a).name if a == drafter else a for a in run)])
        try:
            with open(log, "wb") as out:
                # its own session: a Ctrl-C reaches the bench alone, whose cleanup stops the server
                self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        except OSError:
            self.log.unlink(missing_ok=True)
            raise
        try:
            self._wait_ready()
        except BaseException:  # Ctrl-C or a failed start: the caller never gets it to stop
            self.close()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EdgespecError(f"llama-server exited with {self.proc.returncode} at start: {self._last_line()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise EdgespecError(f"llama-server did not answer within {START_TIMEOUT_S:.0f} s: {self._last_line()}")

    def _last_line(self) -> str:
        try:
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "(no log)"
        return lines[-1] if lines else "(no output)"

    def complete(self, ids: list[int], max_tokens: int, fields: dict | None = None) -> dict:
        """The server's /completion answer for these prompt ids (greedy, no prompt cache), with
        `fields` added (a grammar: structured.server_fields)."""
        body = {"prompt": ids, "n_predict": max_tokens, "temperature": 0.0, "top_k": 1, "cache_prompt": False,
                "return_tokens": True, "stream": False, "seed": 0, **(fields or {})}
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise EdgespecError(f"llama-server on port {self.port} failed: {e} ({self._last_line()})") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.unlink(missing_ok=True)


def decode_timing(answer: dict, is_eog: Callable[[int], bool]) -> tuple[list[int], float, int, int]:
    """(tokens without end-of-generation ones, seconds from the first token to the last,
    drafted, accepted) from a /completion answer. The server's `predicted_ms` runs from
    its first token, which came with the prompt, to its last: the same span as the bench's
    other rows (it reports `predicted_per_second` as `predicted_n` - 1 over it)."""
    tokens = [int(t) for t in answer.get("tokens", []) if not is_eog(int(t))]
    t = answer.get("timings", {})
    seconds = float(t.get("predicted_ms", 0.0)) / 1000.0
    return tokens, seconds, int(t.get("draft_n", 0) or 0), int(t.get("draft_n_accepted", 0) or 0)
