"""What the memory model needs from a GGUF file (`ModelFacts`), read without loading it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import EdgespecError, ModelError
from edgespec.files import forget_gone, write_json
from edgespec.models.export_check import read_manifest
from edgespec.models.gguf_check import read_checked_gguf
from edgespec.models.store import cache_dir

REPACKED = ("Q4_0", "Q4_K", "IQ4_NL")  # weight types llama.cpp repacks on x86 with AVX2
FACTS_VERSION = 3  # bump when ModelFacts gains a field: cached facts of older versions are read again


@dataclass(frozen=True)
class ModelFacts:
    """What the memory model needs from one GGUF file, read without loading it."""

    path: str
    architecture: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_embd: int
    n_ff: int
    head_k: int
    head_v: int
    n_vocab: int  # rows of the LM head (K for a VocabTrim'd drafter)
    n_tokens: int  # vocabulary entries (tokens + merges) llama.cpp keeps
    tensor_bytes: int
    file_bytes: int
    repack_bytes: int  # tensors llama.cpp repacks on x86 with AVX2
    n_ctx_train: int
    embd_bytes: int = 0  # the input embedding: llama.cpp keeps it on the host, whatever it offloads
    output_bytes: int = 0  # the LM head; 0 when tied to the embedding (a GPU then holds a second copy)
    # a VocabTrim'd drafter: the share of the target's tokens its K rows keep, as its export
    # counted them (manifest.json's trim.coverage); None for a full vocabulary
    vocab_coverage: float | None = None

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "ModelFacts":
        """The facts of a GGUF file, cached per file (path, size, mtime).

        Parsing a 150k-token vocabulary with the gguf package leaves about 55 MB
        of Python objects behind in the process's RSS (freed memory the allocator
        keeps), which is exactly what a memory budget cannot afford; so a miss is
        read in a child process and only the small result comes back."""
        p = Path(path).resolve()
        st = p.stat()
        key = {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "facts": FACTS_VERSION}
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]
        cache = cache_dir() / "facts" / f"{digest}.json"
        try:
            data = json.loads(cache.read_text())
            if data.pop("key") == key:
                return cls(**data)
        except (OSError, ValueError, KeyError, TypeError):
            pass
        r = subprocess.run([sys.executable, "-m", "edgespec.models.facts", str(p)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ModelError((r.stderr.strip().splitlines() or [f"cannot read {p}"])[-1])
        data = json.loads(r.stdout)
        if write_json(cache, {**data, "key": key}):  # else read again next time
            forget_gone(cache.parent, lambda r: r["key"]["path"])  # kept by path, as the checks are
        return cls(**data)

    @classmethod
    def read(cls, path: str | os.PathLike) -> "ModelFacts":
        """Parse the file in this process (see from_gguf for why that is avoided)."""
        r = read_checked_gguf(path)
        f = r.fields

        def get(key: str, default=None):
            v = f.get(key)
            if v is None:
                return default
            c = v.contents()
            return max(c) if isinstance(c, list) else c

        arch = str(get("general.architecture"))
        n_embd = int(get(f"{arch}.embedding_length"))
        n_head = int(get(f"{arch}.attention.head_count"))
        n_head_kv = int(get(f"{arch}.attention.head_count_kv", n_head))
        n_layer = int(get(f"{arch}.block_count"))
        head_k = int(get(f"{arch}.attention.key_length", n_embd // n_head))
        head_v = int(get(f"{arch}.attention.value_length", head_k))
        n_tok = len(f["tokenizer.ggml.tokens"].data)
        merges = f.get("tokenizer.ggml.merges")
        rows = {t.name: int(t.shape[1]) for t in r.tensors
                if t.name in ("output.weight", "token_embd.weight") and len(t.shape) == 2}
        out_rows = rows.get("output.weight", rows.get("token_embd.weight", n_tok))  # tied heads reuse the embedding
        sizes = {t.name: int(t.n_bytes) for t in r.tensors}
        repack = 0
        for t in r.tensors:
            shape = [int(s) for s in t.shape]
            if (t.tensor_type.name in REPACKED and len(shape) == 2 and shape[1] % 8 == 0
                    and t.name != "token_embd.weight"):
                repack += int(t.n_bytes)
        return cls(
            path=str(path), architecture=arch, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv,
            n_embd=n_embd, n_ff=int(get(f"{arch}.feed_forward_length", 4 * n_embd)), head_k=head_k,
            head_v=head_v, n_vocab=out_rows, n_tokens=n_tok + (len(merges.data) if merges is not None else 0),
            tensor_bytes=sum(int(t.n_bytes) for t in r.tensors), file_bytes=Path(path).stat().st_size,
            repack_bytes=repack, n_ctx_train=int(get(f"{arch}.context_length", 0) or 0),
            embd_bytes=sizes.get("token_embd.weight", 0), output_bytes=sizes.get("output.weight", 0),
            vocab_coverage=_trim_coverage(Path(path)),
        )


def _trim_coverage(path: Path) -> float | None:
    """trim.coverage from the manifest an `edgespec export --trim-vocab` wrote beside the file."""
    try:
        trim = (read_manifest(path.parent) or {}).get("trim")
        return float(trim["coverage"]) if isinstance(trim, dict) and trim.get("coverage") is not None else None
    except (ModelError, TypeError, ValueError):  # an unreadable manifest is the export checks' business
        return None


if __name__ == "__main__":  # python -m edgespec.models.facts FILE: the facts as JSON (see ModelFacts.from_gguf)
    try:
        print(json.dumps(dataclasses.asdict(ModelFacts.read(sys.argv[1]))))
    except EdgespecError as e:
        sys.exit(str(e))
