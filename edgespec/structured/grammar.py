"""What an answer is held to: a grammar in llguidance's format, compiled from a JSON schema, an
OpenAI `response_format` (text, json_object, json_schema) or Lark text; schemas with their
numbers bounded, so a model cannot write digits until its limit.
"""

from __future__ import annotations

import json
from typing import Any

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
        kind = format_type(fmt)
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

    def constraint(self, tokenizer: Tokenizer) -> "GrammarConstraint":
        """A generation under this grammar, over `tokenizer`'s vocabulary."""
        from edgespec.structured.matcher import GrammarConstraint

        return GrammarConstraint(self, tokenizer)


def format_type(fmt: dict | str | None) -> str | None:
    """A `response_format`'s type: its "type", or the format itself given as a bare string."""
    return fmt.get("type") if isinstance(fmt, dict) else fmt


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
