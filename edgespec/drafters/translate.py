"""Translation between two vocabularies through the text their tokens stand for.

A drafter with another tokenizer (OmniDraft; transformers' universal assisted
generation) reads the target's history as text re-tokenized in its own
vocabulary, and its drafts come back as text re-tokenized in the target's.
Token boundaries of two vocabularies rarely agree, and a tokenizer's split of
the last word depends on what precedes it ("\\n" then "\\n" may become "\\n\\n"),
so both directions re-tokenize a few tokens of look-behind and keep only what
lies past a boundary both sides agree on.

`TranslationCache` is OmniDraft's online cache: from verified output it learns
which target tokens a run of drafter tokens became (the runs between byte
offsets where both tokenizations have a boundary). Drafts are translated
through it first, so they follow how the target actually segments text (a model
does not always emit its tokenizer's canonical split); re-tokenization is the
fallback for runs never seen.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgespec.errors import DrafterError
from edgespec.speculative.backend import Tokenizer
from edgespec.speculative.sequence import common_prefix

# text both vocabularies must reproduce byte for byte to be mapped onto each other
PROBE = "def f(x):\n    return x + 1  # Hello, World!\n\nThe 3 cats' names: \"Tom\" & 'Ann'.\t{a: [1, 2]}\n"


def surface(tok: Tokenizer, t: int) -> bytes:
    """The bytes a token stands for in running text. Control tokens count as their
    text (<|im_end|>), which the other tokenizer parses as its own control token
    when it has one; a BOS counts as nothing, since each side adds its own."""
    if tok.is_special(t):
        return b"" if t == tok.bos_id else tok.token_text(t).encode("utf-8")
    return tok.token_bytes(t)


def _complete(data: bytes | bytearray, end: int | None = None) -> int:
    """The largest offset <= end that does not split a UTF-8 character."""
    end = len(data) if end is None else end
    i = end
    while i > 0 and i > end - 4 and (data[i - 1] & 0xC0) == 0x80:
        i -= 1
    if i > 0 and i > end - 4:
        lead = data[i - 1]
        need = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
        if end - (i - 1) < need:
            return i - 1
    return end


def _is_char_start(data: bytes | bytearray, i: int) -> bool:
    return i == 0 or i >= len(data) or (data[i] & 0xC0) != 0x80


def check_mappable(a: Tokenizer, b: Tokenizer, names: tuple[str, str] = ("drafter", "target")) -> None:
    """Refuse a pair of vocabularies that do not share a text representation."""
    for tok, name in zip((a, b), names):
        ids = tok.encode(PROBE, add_bos=False, special=False)
        got = b"".join(surface(tok, t) for t in ids)
        if got != PROBE.encode():
            raise DrafterError(
                f"the {name}'s vocabulary does not spell plain text back byte for byte "
                f"(got {got[:40]!r}…): its tokens cannot be mapped to the other model's")


def single_token_map(drafter: Tokenizer, target: Tokenizer, width: int) -> np.ndarray:
    """Drafter id -> the target id whose bytes are the same as one token (-1: none).
    Control tokens map to nothing: what follows them is not drafted."""
    index: dict[bytes, int] = {}
    for t in range(target.n_vocab):
        if not target.is_special(t):
            index.setdefault(target.token_bytes(t), t)
    index.pop(b"", None)
    out = np.full(width, -1, dtype=np.int64)
    for d in range(min(drafter.n_vocab, width)):
        if not drafter.is_special(d):
            out[d] = index.get(drafter.token_bytes(d), -1)
    return out


class TextView:
    """One tokenizer's tokenization of a growing text, kept up to date incrementally.

    `append` re-tokenizes only from a few tokens before the end; a trailing
    partial UTF-8 character waits until it is complete.
    """

    def __init__(self, tok: Tokenizer, lookbehind: int = 4) -> None:
        self.tok = tok
        self.lookbehind = lookbehind
        self.reset()

    def reset(self) -> None:
        self.data = bytearray()
        self.ids: list[int] = []
        self.ends: list[int] = []  # byte offset where each token ends
        self.done = 0  # bytes covered by `ids`

    @property
    def pending(self) -> int:
        """Bytes not yet tokenized (an incomplete character)."""
        return len(self.data) - self.done

    def append(self, data: bytes) -> int:
        """Add text; returns the index of the first token that changed."""
        self.data += data
        end = _complete(self.data)
        if end <= self.done:
            return len(self.ids)
        j = max(0, len(self.ids) - self.lookbehind)
        while j > 0 and not _is_char_start(self.data, self.ends[j - 1]):
            j -= 1
        start = self.ends[j - 1] if j else 0
        # invalid UTF-8 (a model may emit any bytes) reaches the drafter as U+FFFD
        new = self.tok.encode(self.data[start:end].decode("utf-8", errors="replace"), add_bos=False, special=True)
        ends, pos = [], start
        for t in new:
            # clamped: a U+FFFD standing for one invalid byte spells three, and ends
            # must stay offsets into `data`, rising (found by fuzzing)
            pos = min(pos + len(surface(self.tok, t)), end)
            ends.append(pos)
        if ends:
            ends[-1] = end  # a lossy tokenizer (an <unk>, U+FFFD) must still cover the text
        first = j + common_prefix(self.ids[j:], new)
        self.ids[j:] = new
        self.ends[j:] = ends
        self.done = end
        return first


class TranslationCache:
    """Drafter-token runs -> the target tokens the same text became in verified output."""

    def __init__(self, max_run: int = 4, max_entries: int = 200_000) -> None:
        self.max_run = max_run
        self.max_entries = max_entries
        self.runs: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.hits = 0
        self.misses = 0

    def learn(self, d_ids: Sequence[int], d_ends: Sequence[int], t_ids: Sequence[int], t_ends: Sequence[int],
              aligned: bool, start: int) -> None:
        """Pair the runs of both tokenizations between the byte offsets where both
        have a boundary. Offsets are in one text; `aligned` says both lists begin
        at the same offset; only runs ending after `start` are new."""
        i = j = di = dj = 0  # di, dj: where the current runs begin
        while i < len(d_ends) and j < len(t_ends):
            if d_ends[i] == t_ends[j]:
                if aligned and d_ends[i] > start and i + 1 - di <= self.max_run and j + 1 - dj <= self.max_run:
                    key = tuple(d_ids[di : i + 1])
                    if len(self.runs) < self.max_entries or key in self.runs:
                        self.runs[key] = tuple(t_ids[dj : j + 1])
                aligned = True
                i += 1
                j += 1
                di, dj = i, j
            elif d_ends[i] < t_ends[j]:
                i += 1
            else:
                j += 1

    def translate(self, d_ids: Sequence[int]) -> tuple[list[int], int]:
        """Target tokens for the longest prefix of `d_ids` covered by known runs,
        and how many drafter tokens that prefix holds."""
        out: list[int] = []
        i = 0
        while i < len(d_ids):
            for n in range(min(self.max_run, len(d_ids) - i), 0, -1):
                hit = self.runs.get(tuple(d_ids[i : i + n]))
                if hit is not None:
                    out.extend(hit)
                    i += n
                    break
            else:
                break
        self.hits += i
        self.misses += len(d_ids) - i
        return out, i

    def memory(self) -> int:
        return len(self.runs) * 200


def retokenize_after(target: Tokenizer, tail: Sequence[int], text: bytes) -> list[int]:
    """Target tokens for `text` written right after the target tokens `tail`.

    The tail is re-tokenized together with the text; only tokens past a prefix
    that reproduces the tail exactly are kept. When the text would merge with the
    tail's last token (" foo" then "bar"), it is tokenized on its own instead,
    which is how the target continues a token it has already emitted."""
    tail = [t for t in tail if surface(target, t)]
    while tail:  # start the look-behind on a whole character
        lb = b"".join(surface(target, t) for t in tail)
        if (lb[0] & 0xC0) != 0x80:
            break
        tail = tail[1:]
    lb = b"".join(surface(target, t) for t in tail)
    whole = lb + text
    end = _complete(whole)
    if end <= len(lb):
        return []
    enc = target.encode(whole[:end].decode("utf-8", errors="replace"), add_bos=False, special=True)
    if enc[: len(tail)] == list(tail):
        return enc[len(tail):]
    own_end = _complete(text)
    try:
        alone = target.encode(bytes(text[:own_end]).decode("utf-8"), add_bos=False, special=True)
    except UnicodeDecodeError:  # the text starts inside a character the tail began
        return []
    return alone if b"".join(surface(target, t) for t in alone) == bytes(text[:own_end]) else []
