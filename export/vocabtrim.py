"""VocabTrim: a drafter's LM head cut to the K tokens the target uses most.

A drafter spends a large share of each step on its LM head (Qwen2.5's 151,936
rows are a quarter of the 0.5B model's weights). Tokens the target almost never
produces are not worth drafting, so only the K most frequent rows are kept, with
the id map back to the full vocabulary in `vocab_map.json` beside the model.
Speculation stays lossless: the target verifies every drafted token.

Frequencies come from running the model over calibration text: each text token
and each of the model's own next-token predictions (teacher-forced, one forward
pass per chunk) counts once. Control tokens are always kept.

- ONNX: only the LM head MatMul's weight is sliced; the input embedding keeps
  the full vocabulary (as in the VocabTrim paper).
- GGUF: llama.cpp requires the LM head, the token embedding and the vocabulary
  to agree, so all three are cut to the same K tokens. The full input embedding
  goes beside the model (`input_embd.gguf`, Q8_0, memory-mapped: only the rows of
  tokens seen are read), and the backend feeds the drafter embedding rows instead
  of ids: a context token outside the kept set reads exactly as in the untrimmed
  drafter. (Exports before it mapped such a token to the least frequent kept one;
  `inputs_trimmed` in the id map says so, and they still load.)
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Sequence

import gguf
import numpy as np

from edgespec.export.gguf_writer import add_as_is, write_out
from edgespec.export.onnx_export import save_in_place
from edgespec.export.source import ExportError
from edgespec.runtimes.vocab_map import INPUT_EMBEDDING, VOCAB_MAP, input_table, map_inputs



def default_calibration() -> list[str]:
    """The shipped bench prompts and validation text: code, prose and chat."""
    root = resources.files("edgespec").joinpath("data")
    texts = [root.joinpath("validation.txt").read_text(encoding="utf-8")]
    for line in root.joinpath("bench_prompts.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            texts.append(row.get("prompt") or "\n".join(m["content"] for m in row["messages"]))
    return texts


def token_counts(model, tok, texts: Sequence[str], chunk: int = 512) -> np.ndarray:
    import torch

    counts = np.zeros(model.config.vocab_size, dtype=np.int64)
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        for s in range(0, len(ids), chunk):
            part = ids[s : s + chunk]
            np.add.at(counts, part, 1)
            with torch.no_grad():
                pred = model(torch.tensor([part]), use_cache=False).logits[0].argmax(-1).numpy()
            np.add.at(counts, pred, 1)
    return counts


def choose_keep(counts: np.ndarray, k: int, always: Sequence[int]) -> np.ndarray:
    """The K ids to keep, most frequent first (ties by id), `always` included."""
    n = len(counts)
    if k > n:
        raise ExportError(f"--trim-vocab {k} is larger than the vocabulary ({n} tokens)")
    always = [i for i in dict.fromkeys(always) if 0 <= i < n]
    if k < len(always):
        raise ExportError(f"--trim-vocab {k} cannot even hold the {len(always)} control tokens")
    order = np.lexsort((np.arange(n), -counts))
    rest = [int(i) for i in order if int(i) not in set(always)][: k - len(always)]
    return np.asarray(always + rest, dtype=np.int64)


def trim_from_counts(counts: np.ndarray, k: int, always: Sequence[int], calibration) -> tuple[np.ndarray, dict]:
    """The ids to keep and the manifest's trim record, from counted token use."""
    keep = choose_keep(counts, k, always)
    info = {
        "k": int(k),
        "calibration": calibration,
        "coverage": float(counts[keep].sum() / max(1, counts.sum())),  # share of counted tokens kept
    }
    return keep, info


def plan_trim(model, tok, k: int, calib: Sequence[Path]) -> tuple[np.ndarray, dict]:
    texts = [Path(p).read_text(encoding="utf-8", errors="replace") for p in calib] or default_calibration()
    return trim_from_counts(token_counts(model, tok, texts), k, sorted(set(tok.all_special_ids)),
                            [str(p) for p in calib] or "shipped prompts")


def write_vocab_map(folder: Path, keep: np.ndarray, inputs_trimmed: bool) -> None:
    (folder / VOCAB_MAP).write_text(json.dumps({"ids": keep.tolist(), "inputs_trimmed": inputs_trimmed}))


def write_input_embedding(folder: Path, weight: np.ndarray, arch: str, exact: bool) -> None:
    """The untrimmed [vocab, hidden] input embedding: F16 beside an f16 export, else Q8_0
    (finer than the model's own 4- or 8-bit rows; a quarter of a float32 copy)."""
    qtype = gguf.GGMLQuantizationType.F16 if exact else gguf.GGMLQuantizationType.Q8_0
    rows = [gguf.quants.quantize(np.asarray(weight[s : s + 8192], dtype=np.float32), qtype)
            for s in range(0, len(weight), 8192)]  # in slices: a float32 copy of Qwen's is 545 MB
    save_input_embedding(folder, arch, np.concatenate(rows), qtype)


def save_input_embedding(folder: Path, arch: str, rows: np.ndarray, qtype) -> None:
    """input_embd.gguf in `folder`: the full token embedding, `rows` already of type `qtype`."""

    w = gguf.GGUFWriter(str(folder / INPUT_EMBEDDING), arch)
    add_as_is(w, "token_embd.weight", rows, qtype)
    write_out(w)


def trim_onnx(model_path: Path, keep: np.ndarray) -> None:
    """Slice the weight of the MatMul that produces `logits` to the kept columns."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(model_path))
    g = m.graph
    producer = {o: n for n in g.node for o in n.output}
    head = producer.get("logits")
    if head is None or head.op_type != "MatMul":
        raise ExportError(f"{model_path}: no MatMul produces the logits; cannot trim its LM head")
    inits = {i.name: i for i in g.initializer}
    w_name = head.input[1]
    if w_name in inits:  # untied: W is [hidden, vocab]
        w = numpy_helper.to_array(inits[w_name])[:, keep]
    elif w_name in producer and producer[w_name].op_type == "Transpose" and producer[w_name].input[0] in inits:
        w = numpy_helper.to_array(inits[producer[w_name].input[0]])[keep].T  # tied: Transpose(embedding)
    else:
        raise ExportError(f"{model_path}: the LM head weight is not a constant; cannot trim it")
    new = numpy_helper.from_array(np.ascontiguousarray(w), "lm_head.weight_trimmed")
    g.initializer.append(new)
    head.input[1] = new.name
    if w_name in inits and not any(w_name in n.input for n in g.node):
        g.initializer.remove(inits[w_name])
    for out in g.output:
        if out.name == "logits":
            out.type.tensor_type.shape.dim[-1].dim_value = len(keep)
    save_in_place(m, model_path)


def to_trimmed(ids: Sequence[int], trim: dict) -> list[int]:
    """Target ids -> the trimmed model's input ids (GGUF trims inputs, ONNX does not)."""
    if not trim.get("inputs_trimmed"):
        return list(ids)
    return map_inputs(ids, input_table(np.asarray(trim["ids"])), len(trim["ids"]))


def expand_logits(logits: np.ndarray, trim: dict) -> np.ndarray:
    """[n, K] trimmed logits -> [n, V] with the dropped tokens far below every kept one."""
    keep = np.asarray(trim["ids"])
    out = np.full((logits.shape[0], trim["vocab_size"]), -1e4, dtype=np.float32)
    out[:, keep] = logits
    return out
