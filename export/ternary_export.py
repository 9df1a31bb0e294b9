"""`edgespec export --to ternary`: every linear layer of the decoder blocks
ternarized (BitNet b1.58 absmean) and packed as TLMM codes, for the `fpga-sim`
backend. Embeddings, norms and the LM head stay float (TeLLMe keeps the LM head
on the CPU too).

The file `model.ternary.npz` holds, per ternary weight W [out, in]:
`W.entry` (table entries, two 4-bit codes per byte for G = 3), `W.sign` (one bit
per code), `W.scale`, `W.shape`; every other tensor as float32. A post-hoc
ternarized model is for arithmetic and timing: useful text needs a model trained
ternary (BitNet style).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np

from edgespec.runtimes.fpga.tlmm import TERNARY_FILE, pack, save_packed, ternarize

G = 3
# the decoder-block projections of llama and qwen2 checkpoints
LINEAR = re.compile(r"model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                   "chat_template.jinja")


def write_ternary(model, checkpoint: Path, out: Path) -> dict:
    """Write the ternary export into `out` (a scratch folder); returns counts for the manifest.
    Tokenizer files come from the staged checkpoint, which keeps a GGUF source's BOS/EOS."""
    arrays: dict = {}
    n_ternary = zeros = 0
    for name, t in model.state_dict().items():
        w = t.detach().float().numpy()
        if LINEAR.search(name):
            wq, scale = ternarize(w)
            save_packed(arrays, name, pack(wq, G, scale))
            n_ternary += wq.size
            zeros += int((wq == 0).sum())
        else:
            arrays[name] = w.astype(np.float32)
    if getattr(model.config, "tie_word_embeddings", False):
        arrays.pop("lm_head.weight", None)  # the embedding serves as the head: stored once
    np.savez(out / TERNARY_FILE, **arrays)
    model.config.save_pretrained(out)
    for f in TOKENIZER_FILES:
        if (checkpoint / f).is_file():
            shutil.copy2(checkpoint / f, out / f)
    return {"ternary_parameters": n_ternary, "ternary_zero_fraction": zeros / max(n_ternary, 1), "group": G}
