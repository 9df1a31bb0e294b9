"""Checks an export folder before a backend opens it: every file its manifest lists
is there with the sha256 the manifest recorded, and an ONNX graph passes onnx's own
checker. A damaged or tampered export gets a one-line ModelError, never a crash in
native code.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgespec.errors import ModelError
from edgespec.files import sha256_file

MANIFEST = "manifest.json"


def file_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under the folder but the manifest, by relative path: what
    an export records so a later load can tell its files are the ones written."""
    return {f.relative_to(folder).as_posix(): sha256_file(f) for f in sorted(folder.rglob("*"))
            if f.is_file() and f.name != MANIFEST}


def read_manifest(folder: Path) -> dict | None:
    p = folder / MANIFEST
    if not p.is_file():
        return None  # a folder written by hand (or by optimum directly): nothing to compare
    try:
        manifest = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{p} is not a readable manifest: {e}") from None
    if not isinstance(manifest, dict):
        raise ModelError(f"{p} is not a readable manifest: not a JSON object")
    return manifest


def check_manifest(folder: Path) -> None:
    """The files the manifest lists exist and hash to what it recorded."""
    manifest = read_manifest(folder)
    files = (manifest or {}).get("files") or {}
    if not isinstance(files, dict):
        raise ModelError(f"{folder / MANIFEST}: 'files' is not a table of sha256 digests")

    for rel, digest in files.items():
        f = (folder / rel).resolve()
        if folder.resolve() not in f.parents:
            raise ModelError(f"{folder / MANIFEST} names a file outside its folder: {rel}")
        if not f.is_file():
            raise ModelError(f"export {folder} is incomplete: {rel} is missing")
        actual = sha256_file(f)
        if actual != digest:
            raise ModelError(f"{f} does not match its manifest (sha256 {actual[:16]}… vs {str(digest)[:16]}…): "
                             f"damaged or changed since export")


def check_onnx(path: Path) -> None:
    """onnx's checker over the graph (external data included, read from the path)."""
    import onnx

    try:
        onnx.checker.check_model(str(path))
    except Exception as e:  # onnx raises ValidationError, protobuf DecodeError, OSError...
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ModelError(f"{path} is not a valid ONNX model: {first}") from None


def check_export(folder: Path, model: Path) -> None:
    """The manifest's digests hold and, for ONNX, the graph is well formed. GGUF files
    get their structural check from gguf_check, as any local GGUF does."""
    check_manifest(folder)
    if model.suffix.lower() == ".onnx":
        check_onnx(model)
