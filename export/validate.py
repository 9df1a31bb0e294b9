"""How well an export matches its source, on a fixed text: the largest logit
difference, top-1 agreement (the export's argmax equals the source's) and
perplexity of both on that text; and how fast the export decodes one token after it."""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path

import numpy as np

from edgespec.export.vocabtrim import expand_logits, to_trimmed
from edgespec.runtimes import open_backend


def validation_text() -> str:
    return resources.files("edgespec").joinpath("data/validation.txt").read_text(encoding="utf-8")


def source_logits(model, ids: list[int]) -> np.ndarray:
    """[len(ids), vocab] float32 logits of the transformers model."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False)
    return out.logits[0].float().numpy()


# untimed one-token steps first: the first ones after the text's batch still build the
# one-token graph and fault in its buffers
WARM_STEPS = 4


def export_logits(path: Path, ids: list[int], threads: int | None = None, trim: dict | None = None,
                  decode_steps: int = 0) -> tuple[np.ndarray, float | None]:
    """The same through the backend that will run the export (llama.cpp or ONNX Runtime),
    and, with `decode_steps`, the median milliseconds of one-token decode steps after
    that text (what a quantization costs or saves in speed, beside what it costs in accuracy).

    A VocabTrim'd export has logits for its kept tokens only; they are scattered
    back into the full vocabulary (the rest at -inf) so both compare column by column.
    """
    feed = list(ids) if trim is None else to_trimmed(ids, trim)
    with open_backend(path, n_ctx=len(ids) + WARM_STEPS + decode_steps + 16, threads=threads) as b:
        logits = np.array(b.eval(feed), dtype=np.float32)
        steps = []
        room = b.n_ctx - len(feed)  # a small model's context may end soon after the text
        for i, t in enumerate(feed[: min(WARM_STEPS + decode_steps, room)] if decode_steps else []):
            start = time.perf_counter()
            b.eval([t])
            if i >= WARM_STEPS:
                steps.append(time.perf_counter() - start)
    if trim is not None:
        logits = expand_logits(logits, trim)
    return logits, (float(np.median(steps)) * 1000 if steps else None)


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
