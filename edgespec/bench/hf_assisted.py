"""transformers' own generation as a peer in `edgespec bench --peers hf`: plain greedy, and
universal assisted generation (UAG: `assistant_model` with `assistant_tokenizer`), the
cross-tokenizer speculation of Hugging Face's `AssistedCandidateGeneratorDifferentTokenizers`.

Both run the same GGUF files as llama.cpp does, dequantized to float32 by transformers'
`gguf_file=` loader, on the same prompt token ids. Their speed-up is measured against
transformers' own plain greedy run (another engine than llama.cpp: absolute tokens/s do not
compare, ratios and acceptance do). UAG runs with transformers' defaults, as its users run it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from edgespec.bench.common import Run
from edgespec.errors import EdgespecError
from edgespec.export.source import ExportError, Source, load_model
from edgespec.models.gguf_check import check_gguf, read_gguf
from edgespec.speculative.backend import Tokenizer


def _load(path: Path):
    """(model, tokenizer) of a GGUF file through transformers, with the file's own BOS choice
    (transformers' GGUF conversion turns BOS on for SmolLM2 whatever the file says, and UAG
    re-tokenizes text for the drafter with its tokenizer's special tokens)."""
    if path.suffix.lower() != ".gguf":
        raise EdgespecError(f"--peers hf loads GGUF files in transformers; {path} is not one")
    try:
        model, tok = load_model(Source(path, "gguf", check_gguf(path).architecture))
    except ExportError as e:
        raise EdgespecError(str(e)) from None
    field = read_gguf(path).fields.get("tokenizer.ggml.add_bos_token")
    if field is not None and hasattr(tok, "add_bos_token"):
        tok.add_bos_token = bool(field.contents())
    return model, tok


@contextmanager
def _counting(counts: list[int]) -> Iterator[None]:
    """Count drafted and accepted tokens: transformers reports each verification to its
    candidate generator (`update_candidate_strategy` with the target's logits for the
    drafted tokens plus one, and the number that matched) and keeps no totals itself."""
    from transformers.generation.candidate_generator import AssistedCandidateGeneratorDifferentTokenizers as G

    original = G.update_candidate_strategy

    def update(self, input_ids, scores, num_matches):
        counts[0] += scores.shape[1] - 1
        counts[1] += int(num_matches)
        counts[2] += 1
        return original(self, input_ids, scores, num_matches)

    G.update_candidate_strategy = update
    try:
        yield
    finally:
        G.update_candidate_strategy = original


class _FirstToken:
    """A generate() streamer that notes when the first new tokens arrive (its first put is
    the prompt) and how many came at once, so decode time excludes the prefill as the
    bench's other rows do."""

    def __init__(self) -> None:
        self.puts, self.first, self.first_n = 0, None, 1

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first, self.first_n = time.perf_counter(), value.numel()

    def end(self) -> None:
        pass


class HfGeneration:
    """One bench method: transformers' greedy generate on a target, assisted by a drafter
    of another tokenizer when one is given."""

    def __init__(self, target, target_tok, eog: Sequence[int], drafter=None, drafter_tok=None) -> None:
        self.target, self.tok, self.eog = target, target_tok, list(eog)
        self.drafter, self.drafter_tok = drafter, drafter_tok

    def run(self, ids: list[int], max_tokens: int, fmt: dict | None = None) -> Run:
        import torch

        assert fmt is None, "the bench refuses --peers hf for structured prompts"

        kw = {}
        if self.drafter is not None:
            kw = {"assistant_model": self.drafter, "tokenizer": self.tok, "assistant_tokenizer": self.drafter_tok}
        counts = [0, 0, 0]
        streamer = _FirstToken()
        x = torch.tensor([ids])
        with torch.inference_mode(), _counting(counts):
            out = self.target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_tokens,
                                       do_sample=False, eos_token_id=self.eog, pad_token_id=self.eog[0],
                                       streamer=streamer, **kw)
        end = time.perf_counter()
        toks = out[0, len(ids):].tolist()
        while toks and toks[-1] in self.eog:  # the bench's other rows stop before the end-of-generation token
            toks.pop()
        decode_s = end - streamer.first if streamer.first else 0.0
        # assisted generation verifies its first draft in the prefill's own pass, so its first put can
        # hold several tokens: the time after it covers len - first_n tokens, the bench counts len - 1
        if 1 < streamer.first_n < len(toks):
            decode_s *= (len(toks) - 1) / (len(toks) - streamer.first_n)
        drafted, accepted, steps = counts
        return Run(toks, decode_s, drafted, accepted, steps=steps)


def hf_methods(target: Path, target_tokenizer: Tokenizer, drafters: Sequence[tuple[str, Path, Tokenizer]],
               eog: Sequence[int], threads: int, texts: Sequence[str] = ()) -> tuple[dict[str, HfGeneration], list[str]]:
    """`hf:plain` and one `hf:uag:<label>` per drafter model (label, file, its llama.cpp
    tokenizer), sharing the target's weights; and a notice for each model whose tokenizer, as
    transformers converts it from the GGUF, splits `texts` otherwise than llama.cpp does (UAG
    translates every draft through it)."""
    import torch

    torch.set_num_threads(threads)
    model, tok = _load(target)
    methods = {"hf:plain": HfGeneration(model, tok, eog)}
    tokenizers = [(target, target_tokenizer, tok)]
    for label, path, ours in drafters:
        d_model, d_tok = _load(path)
        methods[f"hf:uag:{label}"] = HfGeneration(model, tok, eog, d_model, d_tok)
        tokenizers.append((path, ours, d_tok))
    notices = []
    for path, ours, theirs in tokenizers if texts else []:
        same = sum(ours.encode(x, add_bos=False) == theirs(x, add_special_tokens=False)["input_ids"] for x in texts)
        if same < len(texts):
            notices.append(f"transformers' tokenizer for {path.name} splits {len(texts) - same} of {len(texts)} "
                           "prompts otherwise than llama.cpp: its hf:* rows are handicapped by the conversion")
    return methods, notices
