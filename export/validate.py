"""How well an export matches its source, on a fixed text: the largest logit
difference, top-1 agreement (the export's argmax equals the source's) and
perplexity of both on that text."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np


def validation_text() -> str:
    return resources.files("edgespec").joinpath("data/validation.txt").read_text(encoding="utf-8")


def source_logits(model, ids: list[int]) -> np.ndarray:
    """[len(ids), vocab] float32 logits of the transformers model."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False)
    return out.logits[0].float().numpy()


def export_logits(path: Path, ids: list[int], threads: int | None = None, trim: dict | None = None) -> np.ndarray:
    """The same through the backend that will run the export (llama.cpp or ONNX Runtime).

    A VocabTrim'd export has logits for its kept tokens only; they are scattered
    back into the full vocabulary (the rest at -inf) so both compare column by column.
    """
    from ..runtimes import open_backend

    with open_backend(path, n_ctx=len(ids) + 16, threads=threads) as b:
        if trim is None:
            return np.array(b.eval(ids), dtype=np.float32)
        from .vocabtrim import expand_logits, to_trimmed

        return expand_logits(b.eval(to_trimmed(ids, trim)), trim)


def perplexity(logits: np.ndarray, ids: list[int], mask: np.ndarray | None = None) -> float:
    x = logits[:-1].astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    nll = -logp[np.arange(len(ids) - 1), ids[1:]]
    return float(np.exp(nll[mask].mean() if mask is not None else nll.mean()))


def compare(ref: np.ndarray, got: np.ndarray, ids: list[int], trim: dict | None = None) -> dict:
    """For a VocabTrim'd export, logits and perplexity are compared where the next
    token is one it kept (the rest it cannot name); top-1 agreement everywhere."""
    mask, cols = None, slice(None)
    extra = {}
    if trim is not None:
        kept = np.zeros(ref.shape[1], dtype=bool)
        kept[np.asarray(trim["ids"])] = True
        mask, cols = kept[np.asarray(ids[1:])], kept
        extra = {"next_token_kept": float(mask.mean())}
    ppl_ref, ppl_got = perplexity(ref, ids, mask), perplexity(got, ids, mask)
    return {
        "tokens": len(ids),
        "max_abs_dlogit": float(np.abs(ref[:, cols] - got[:, cols]).max()),
        "top1_agreement": float((ref.argmax(1) == got.argmax(1)).mean()),
        "perplexity_source": ppl_ref,
        "perplexity_export": ppl_got,
        "perplexity_ratio": ppl_got / ppl_ref,
        **extra,
    }
