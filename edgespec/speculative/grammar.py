"""Constrained decoding: a grammar decides which tokens the target may choose (llguidance).

The mask applies wherever the target chooses: greedy takes the argmax of the masked logits,
sampling draws from the masked, renormalized distribution (the mask comes before temperature,
top-k and top-p, as in vLLM and llama.cpp). A draft is cut at its first token the grammar
refuses, so nothing illegal is verified or emitted. Where the grammar allows one continuation
only, its tokens (llguidance's fast-forward tokens) lead the draft at no drafting cost.
"""

from __future__ import annotations

import functools
import json
import time
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from edgespec.errors import EdgespecError
from edgespec.speculative.backend import Tokenizer

# JSON as the models write it and `json.dumps` prints it; no free whitespace, which a model can
# repeat until the limit
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# any JSON object, spelled out so that its numbers are bounded too (bounded)
ANY_JSON_OBJECT = {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}, "$defs": {"value": {"anyOf": [
    {"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
    {"type": "array", "items": {"$ref": "#/$defs/value"}},
    {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}}]}}}
# a number has at most 16 digits before its point and 9 after it (llama.cpp's JSON grammars bound
# them too): a small model sampling digits can otherwise write them until the answer's limit
NUMBER_BOUND, NUMBER_STEP = 10**16 - 1, 1e-9
DATA_KEYWORDS = ("enum", "const", "default", "examples")  # values, not schemas: never rewritten


class GrammarError(EdgespecError):
    """A schema or grammar that cannot be compiled, or exceeds the parser's limits."""


class Grammar:
    """A compiled grammar (llguidance's format): what a Constraint follows, one per generation."""

    def __init__(self, text: str, description: str) -> None:
        self.text, self.description = text, description

    @property
    def is_json(self) -> bool:
        """Its answers are JSON values (a schema, or any object)."""
        return self.description == "JSON schema"

    @classmethod
    def json_schema(cls, schema: dict | str) -> "Grammar":
        """Answers that are JSON valid against `schema` (a dict, or its JSON text)."""
        import llguidance

        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as e:
                raise GrammarError(f"the JSON schema is not JSON: {e}") from None
        if not isinstance(schema, dict):
            raise GrammarError("a JSON schema is an object")
        try:
            text = llguidance.LLMatcher.grammar_from_json_schema(bounded(schema), overrides=JSON_STYLE)
        except ValueError as e:
            raise GrammarError(f"the JSON schema cannot be compiled: {e}") from None
        return cls._checked(text, "JSON schema")

    @classmethod
    def json_object(cls) -> "Grammar":
        """Any JSON object (OpenAI's response_format json_object)."""
        return cls.json_schema(ANY_JSON_OBJECT)

    @classmethod
    def response_format(cls, fmt: dict | None) -> "Grammar | None":
        """OpenAI's `response_format`: {"type": "text"} (None: free text), {"type": "json_object"},
        or {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}."""
        kind = None if fmt is None else fmt.get("type") if isinstance(fmt, dict) else fmt
        if kind in (None, "text"):
            return None
        if kind == "json_object":
            return cls.json_schema(fmt.get("schema") or ANY_JSON_OBJECT)  # a schema here: llama-server's extension
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
                raise GrammarError("response_format.json_schema must be an object with a `schema` object")
            return cls.json_schema(spec.get("schema") or ANY_JSON_OBJECT)
        raise GrammarError(f"response_format type {kind!r} is not one of text, json_object, json_schema")

    @classmethod
    def lark(cls, text: str) -> "Grammar":
        """A Lark grammar, llguidance's dialect (start rule `start`)."""
        import llguidance

        return cls._checked(llguidance.LLMatcher.grammar_from_lark(text), "grammar")

    @classmethod
    def _checked(cls, text: str, what: str) -> "Grammar":
        import llguidance

        error = llguidance.LLMatcher.validate_grammar(text)
        if error:
            raise GrammarError(f"the {what} cannot be compiled: {error.splitlines()[0][:300]}")
        return cls(text, what)

    def constraint(self, tokenizer: Tokenizer) -> "Constraint":
        return Constraint(self, tokenizer)


def bounded(schema: Any) -> Any:
    """The schema with every number lacking a bound given +-NUMBER_BOUND, and every non-integer
    one lacking a step NUMBER_STEP (what it allows, the schema as given allows too)."""
    if isinstance(schema, list):
        return [bounded(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in DATA_KEYWORDS else bounded(v) for k, v in schema.items()}
    types = out.get("type")
    if types in ("integer", "number") or isinstance(types, list) and {"integer", "number"} & set(types):
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -NUMBER_BOUND
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = NUMBER_BOUND
        if "integer" not in (types if isinstance(types, list) else [types]) and "multipleOf" not in out:
            out["multipleOf"] = NUMBER_STEP
    return out


class Unconstrained:
    """Every token allowed: the engine's grammar when none is asked for."""

    seconds = 0.0  # spent computing masks, forced tokens and checks

    def forced(self, k: int) -> list[int]:
        return []

    def legal(self, tokens: Sequence[int]) -> int:
        return len(tokens)

    def masked(self, draft: Sequence[int], logits: np.ndarray, argmax_only: bool = False) -> np.ndarray:
        return logits

    def commit(self, tokens: Sequence[int]) -> None:
        pass


def _timed(method: Callable) -> Callable:
    """The method's time added to the constraint's `seconds`: what the grammar costs the answer."""

    @functools.wraps(method)
    def timed(self, *args):
        t0 = time.perf_counter()
        try:
            return method(self, *args)
        finally:
            self.seconds += time.perf_counter() - t0

    return timed


class Constraint(Unconstrained):
    """One generation under a grammar: llguidance's matcher over the target's vocabulary,
    advanced by the tokens emitted."""

    def __init__(self, grammar: Grammar, tokenizer: Tokenizer) -> None:
        import llguidance

        self.grammar, self.tokenizer = grammar, tokenizer
        self.matcher = llguidance.LLMatcher(_lltokenizer(tokenizer), grammar.text, log_level=0)
        self._check()
        self.n_vocab = tokenizer.n_vocab
        self.seconds = 0.0

    @_timed
    def forced(self, k: int) -> list[int]:
        """At most k tokens, from here, each the only one the grammar allows where it stands: the
        target's masked choice there is certain, so the text always runs through them (drafters
        may read them as history). llguidance's fast-forward tokens are the candidates."""
        if k <= 0 or self.matcher.is_stopped():
            return []
        forced = []
        for t in self.matcher.compute_ff_tokens()[:k]:
            refused = self._refused(self.n_vocab)
            if refused[t] or np.count_nonzero(refused) != self.n_vocab - 1 or not self.matcher.consume_token(t):
                break
            forced.append(t)
        if forced:
            self.matcher.rollback(len(forced))
        self._check()
        return forced

    @_timed
    def legal(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from here, the grammar allows in a row."""
        return self.matcher.validate_tokens(list(tokens)) if len(tokens) else 0

    @_timed
    def masked(self, draft: Sequence[int], logits: np.ndarray, argmax_only: bool = False) -> np.ndarray:
        """Rows 0..len(draft) of `logits` (after the last token, then after each draft token, all
        of them legal) with every token the grammar refuses there at -inf. `argmax_only` (greedy):
        a row whose best token is allowed is left as it is, its argmax being the masked one. Rows
        after an end token are left too: the answer ends there, they choose nothing."""
        out = logits[: len(draft) + 1]
        consumed, copied = 0, False
        for i in range(len(out)):
            refused = self._refused(out.shape[1])
            if not (argmax_only and not refused[int(np.argmax(out[i]))]):
                if not copied:
                    out, copied = np.array(out), True
                out[i, refused] = -np.inf
            if i == len(draft) or self.tokenizer.is_eog(int(draft[i])):
                break
            if not self.matcher.consume_token(int(draft[i])):
                self._check()
            consumed += 1
        self.matcher.rollback(consumed)
        return out

    @_timed
    def commit(self, tokens: Sequence[int]) -> None:
        """The tokens emitted, through the first end token: the grammar moves past them."""
        for t in tokens:  # one at a time: consume_tokens refuses an end token once the grammar is done
            if not self.matcher.consume_token(int(t)):
                self._check()
            if self.tokenizer.is_eog(int(t)):
                break

    def _refused(self, width: int) -> np.ndarray:
        """Per token of a logits row `width` wide: True where the grammar refuses it here (ids
        past the vocabulary, padding in some models' outputs, are refused)."""
        bits = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
        refused = np.unpackbits(~bits, count=min(width, 8 * len(bits)), bitorder="little").view(bool)
        if len(refused) < width:
            refused = np.concatenate([refused, np.ones(width - len(refused), dtype=bool)])
        refused[self.n_vocab:] = True
        return refused

    def _check(self) -> None:
        if self.matcher.is_error():
            raise GrammarError(f"the {self.grammar.description} cannot be followed: "
                               f"{self.matcher.get_error().splitlines()[0][:300]}")


_TOKENIZERS: "weakref.WeakKeyDictionary[Tokenizer, Any]" = weakref.WeakKeyDictionary()


def _lltokenizer(tokenizer: Tokenizer):
    """llguidance's view of a vocabulary (built once per tokenizer: a pass over every token)."""
    import llguidance

    if tokenizer not in _TOKENIZERS:
        vocabulary = _Vocabulary(tokenizer)
        _TOKENIZERS[tokenizer] = llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocabulary),
                                                        eos_token=vocabulary.ends or None)
    return _TOKENIZERS[tokenizer]


class _Vocabulary:
    """What llguidance's TokenizerWrapper reads: each token's bytes (a special token's text
    after 0xff, llguidance's mark for it), the end tokens, and a way to tokenize text."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        special = [t for t in range(tokenizer.n_vocab) if tokenizer.is_special(t) or tokenizer.is_eog(t)]
        ends = [t for t in special if tokenizer.is_eog(t)]
        self.tokens = [tokenizer.token_bytes(t) for t in range(tokenizer.n_vocab)]
        for t in special:
            self.tokens[t] = b"\xff" + tokenizer.token_text(t).encode("utf-8")
        self.ends = ends
        self.eos_token_id = tokenizer.eos_id if tokenizer.eos_id in ends else (ends or [0])[0]
        self.bos_token_id = tokenizer.bos_id
        self.special_token_ids = special

    def __call__(self, text: str) -> list[int]:
        if isinstance(text, bytes):  # tells TokenizerWrapper to pass text: encode takes str
            raise TypeError("text, not bytes")
        return self._tokenizer.encode(text, add_bos=False, special=False)
