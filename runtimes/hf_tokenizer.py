"""A Hugging Face tokenizer folder (tokenizer.json + tokenizer_config.json) as an
edgespec Tokenizer, for backends whose model files carry no vocabulary (ONNX).

Built on the `tokenizers` library (what transformers' fast tokenizers run on);
only the byte mapping of token pieces is done here, because `tokenizers` decodes
whole sequences, while drafters and stop strings need each token's raw bytes.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from edgespec.errors import ModelError
from edgespec.speculative.backend import Tokenizer


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    # GPT-2's reversible bytes <-> printable unicode table, used by every byte-level BPE
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class HFTokenizer(Tokenizer):
    def __init__(self, folder: str | Path) -> None:
        from tokenizers import Tokenizer as _Tok

        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise ModelError(f"{folder} has no tokenizer.json (export it with its tokenizer)")
        try:
            self._tok = _Tok.from_file(str(path))
            spec = json.loads(path.read_text(encoding="utf-8"))
        except Exception as e:  # tokenizers raises plain Exception subclasses
            raise ModelError(f"cannot read {path}: {e}") from None
        cfg_path = folder / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        self._template = cfg.get("chat_template")
        jinja = folder / "chat_template.jinja"  # newer transformers save the template beside the config
        if self._template is None and jinja.is_file():
            self._template = jinja.read_text(encoding="utf-8")
        if isinstance(self._template, list):  # named templates: use the default one
            self._template = next((t["template"] for t in self._template if t.get("name") == "default"), None)
        self.n_vocab = self._tok.get_vocab_size(with_added_tokens=True)
        self._byte_level = "ByteLevel" in json.dumps(spec.get("decoder") or {})
        added = {a["id"]: a for a in spec.get("added_tokens", [])}
        self._special = {i for i, a in added.items() if a.get("special")}
        self._added = {i: a["content"] for i, a in added.items()}

        def token_id(name: str) -> int | None:
            v = cfg.get(name)
            if isinstance(v, dict):
                v = v.get("content")
            return self._tok.token_to_id(v) if isinstance(v, str) else None

        self.bos_id = token_id("bos_token")
        self.eos_id = token_id("eos_token")
        self.add_bos = bool(cfg.get("add_bos_token", False)) and self.bos_id is not None
        gen_cfg = folder / "generation_config.json"
        eog = {self.eos_id} if self.eos_id is not None else set()
        if gen_cfg.is_file():
            e = json.loads(gen_cfg.read_text(encoding="utf-8")).get("eos_token_id")
            eog |= set(e if isinstance(e, list) else [e] if e is not None else [])
        for name in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>"):
            i = self._tok.token_to_id(name)
            if i is not None and i in self._special:
                eog.add(i)
        self._eog = eog
        self._pieces: dict[int, bytes] = {}

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        # with special=False, text such as "<|im_start|>" is tokenized as plain text
        self._tok.encode_special_tokens = not special
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if add_bos and self.add_bos and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id, *ids]
        return ids

    def token_bytes(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._bytes(token)
        return piece

    def _bytes(self, token: int) -> bytes:
        if token in self._special:
            return b""  # control tokens print nothing, as in llama.cpp
        if token in self._added:
            return self._added[token].encode("utf-8")
        s = self._tok.id_to_token(token)
        if s is None:
            return b""
        if self._byte_level:
            dec = _byte_decoder()
            return bytes(dec[c] for c in s if c in dec)
        if len(s) == 6 and s.startswith("<0x") and s.endswith(">"):  # SentencePiece byte fallback
            return bytes([int(s[3:5], 16)])
        return s.replace("\u2581", " ").encode("utf-8")

    def token_text(self, token: int) -> str:
        if token in self._added:
            return self._added[token]
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return token in self._eog

    def is_special(self, token: int) -> bool:
        return token in self._special

    @property
    def chat_template(self) -> str | None:
        return self._template
