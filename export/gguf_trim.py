"""VocabTrim straight on a GGUF file, as the memory planner does it for a drafter.

`edgespec export --trim-vocab` goes through transformers and quantizes again; a
planner that trims a drafter so it fits a budget needs neither: the kept rows of
the token embedding and LM head are sliced out of the quantized tensors as they
are (a row of a block-quantized tensor is a whole number of blocks), every other
tensor is copied byte for byte, and token use is counted by llama.cpp itself.
The result is an export folder like the pipeline's: model.gguf, vocab_map.json,
input_embd.gguf (the source's full embedding, its own type: a context token
outside the kept set reads exactly as in the source) and manifest.json.

Run as `python -m edgespec.export.gguf_trim SRC K OUT`: counting holds a chunk's
logits (K-independent, the full vocabulary), which a planner's process, measured
against a budget, should not keep.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import gguf
import numpy as np

from edgespec.errors import EdgespecError, ModelError
from edgespec.export.gguf_writer import add_as_is, copy_fields, write_out
from edgespec.export.source import ExportError
from edgespec.export.vocabtrim import default_calibration, save_input_embedding, trim_from_counts, write_vocab_map
from edgespec.files import locked, replace_folder, scratch_beside, sha256_file
from edgespec.models.export_check import MANIFEST, file_digests
from edgespec.models.gguf_check import read_gguf
from edgespec.models.store import cache_dir

HEADS = ("token_embd.weight", "output.weight")


def count_tokens(model_path: Path, texts: Sequence[str], chunk: int = 128) -> np.ndarray:
    """Each text token and each of the model's greedy next-token predictions (teacher-forced),
    counted once, as `vocabtrim.token_counts` does in transformers."""
    from edgespec.runtimes.llamacpp import LlamaCppBackend

    with LlamaCppBackend(model_path, n_ctx=chunk, n_batch=chunk) as b:
        counts = np.zeros(b.n_vocab, dtype=np.int64)
        for text in texts:
            ids = b.tokenizer.encode(text, add_bos=False, special=False)
            for s in range(0, len(ids), chunk):
                part = ids[s : s + chunk]
                b.rollback(0)
                np.add.at(counts, part, 1)
                np.add.at(counts, b.eval(part).argmax(axis=1), 1)
    return counts


def trim_gguf(src: Path, keep: np.ndarray, out: Path, reader=None) -> None:
    """`src` (read already: `reader`) with its vocabulary, token embedding and LM head cut to
    `keep` (in that order) into `out`; its full token embedding goes to input_embd.gguf beside it."""

    r = reader if reader is not None else read_gguf(src)
    arch = str(r.fields["general.architecture"].contents())
    w = gguf.GGUFWriter(str(out / "model.gguf"), arch)
    copy_fields(w, r, keep)
    embd = None
    for t in r.tensors:
        data = t.data
        if t.name in HEADS:
            if len(data) <= int(keep.max()):
                raise ExportError(f"{src}: {t.name} has {len(data)} rows, fewer than the vocabulary")
            if t.name == "token_embd.weight":
                embd = t
            data = data[keep]
        add_as_is(w, t.name, data, t.tensor_type)
    if embd is None:
        raise ExportError(f"{src} has no token_embd.weight to trim")
    write_out(w)
    save_input_embedding(out, arch, embd.data, embd.tensor_type)


def write_trimmed(src: Path, k: int, out: Path, texts: Sequence[str] | None = None) -> dict:
    """An export folder holding `src` trimmed to its K most used tokens (see module doc);
    written in a scratch folder renamed into place, so an interrupted trim leaves nothing."""

    src, out = Path(src), Path(out)
    t0 = time.perf_counter()
    counts = count_tokens(src, texts if texts is not None else default_calibration())
    r = read_gguf(src)
    types = r.fields.get("tokenizer.ggml.token_type")
    control = int(gguf.TokenType.CONTROL)  # always kept, as the pipeline keeps special tokens
    always = [i for i, t in enumerate(types.contents()) if t == control] if types is not None else []
    keep, trim = trim_from_counts(counts, k, always, "shipped prompts" if texts is None else "given texts")
    trim.update(inputs_trimmed=False, vocab_size=int(len(counts)), counted_by="llama.cpp")
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = scratch_beside(out)
    try:
        trim_gguf(src, keep, scratch, r)
        write_vocab_map(scratch, keep, inputs_trimmed=False)
        manifest = {
            "source": str(src.resolve()), "source_kind": "gguf", "source_sha256": sha256_file(src),
            "architecture": str(r.fields["general.architecture"].contents()), "format": "gguf",
            "quantization": "as the source (rows sliced, not quantized again)", "model_file": "model.gguf",
            "vocab_size": int(len(counts)), "trim_k": int(k), "trim": trim,
            "parameters": None, "size_bytes": sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file()),
            "files": file_digests(scratch), "validation": None,
            "stage_seconds": {"trim": time.perf_counter() - t0},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2))
        replace_folder(scratch, out)
        return manifest
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def cached_trim(src: Path, k: int) -> Path:
    """The model file of `src` trimmed to K tokens, built on first use (in a child process,
    see the module doc) into the cache, where a later plan finds it."""

    src = Path(src).resolve()
    st = src.stat()
    key = json.dumps({"path": str(src), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    folder = cache_dir() / "trimmed" / f"{src.stem}-{hashlib.sha256(key.encode()).hexdigest()[:12]}-trim{k}"
    model = folder / "model.gguf"
    if model.is_file():
        return model
    with locked(folder):  # a second process trimming the same model waits, then finds it built
        if not model.is_file():
            _trim_in_child(src, k, folder)
    drop_stale_trims(folder.parent, keep=folder)
    return model


def _trim_in_child(src: Path, k: int, folder: Path) -> None:

    model = folder / "model.gguf"
    print(f"edgespec: trimming {src.name} to its {k} most used tokens (VocabTrim) to fit the memory budget; "
          f"once, into {folder}", file=sys.stderr)
    r = subprocess.run([sys.executable, "-m", "edgespec.export.gguf_trim", str(src), str(k), str(folder)],
                       capture_output=True, text=True)
    if r.returncode != 0 or not model.is_file():
        raise ModelError((r.stderr.strip().splitlines() or [f"could not trim {src}"])[-1])


def drop_stale_trims(trimmed: Path, keep: Path) -> list[Path]:
    """Remove trims no plan can find again: their source is gone, or is the same path
    as `keep`'s but has changed since (a new download), so their key no longer matches.
    Each is 100-400 MB; trims of a current source at other K stay, for other budgets."""
    def source(folder: Path) -> str | None:
        try:
            return json.loads((folder / MANIFEST).read_text()).get("source")
        except (OSError, ValueError):
            return None

    current = source(keep)
    key = keep.name.rsplit("-trim", 1)[0]
    dropped = []
    for folder in trimmed.iterdir():
        src = source(folder) if folder.is_dir() and folder != keep and not folder.name.startswith(".") else None
        if src is not None and (not Path(src).exists() or (src == current and not folder.name.startswith(key + "-"))):
            shutil.rmtree(folder, ignore_errors=True)
            dropped.append(folder)
    return dropped


if __name__ == "__main__":
    try:
        write_trimmed(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
    except (EdgespecError, OSError, ValueError) as e:  # a line for the planner's note, no traceback
        print(f"cannot trim {sys.argv[1]}: {e}", file=sys.stderr)
        sys.exit(1)
