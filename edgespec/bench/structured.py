"""What a structured prompt asks of llama.cpp's own rows (llama-server, llama-cpp-python): the
same JSON schema or tool calls as a GBNF grammar, llama.cpp's format, through its own
json_schema_to_gbnf, and for tools the same tool_choice as llama-server's own chat handler
words it. edgespec's rows follow the prompt's format through llguidance."""

from __future__ import annotations

import json
import re

from edgespec.structured.tools import CLOSE, OPEN, Tools

ANY_OBJECT = {"type": "object"}
TRIGGER_WORD = 1  # llama.cpp's COMMON_GRAMMAR_TRIGGER_TYPE_WORD in /completion's grammar_triggers


def waits_for_a_call(fmt: dict | None) -> bool:
    """The row offers tools with tool_choice "auto": the answer is free until it opens a call,
    which llama.cpp holds to a grammar only from there (a lazy grammar; llama-server has one,
    llama-cpp-python's Llama does not)."""
    return bool(fmt) and "tools" in fmt and Tools(**fmt).choice == "auto"


def server_fields(fmt: dict | None) -> dict:
    """What llama-server's /completion is asked for a prompt row's output format: as its own
    chat handler asks for tools (common/chat-auto-parser-generator.cpp): "auto" a lazy grammar
    of the calls, triggered by the opening tag, kept one token; "none" no grammar."""
    if waits_for_a_call(fmt):
        return {"grammar": _calls(Tools(**fmt)), "grammar_lazy": True, "preserved_tokens": [OPEN, CLOSE],
                "grammar_triggers": [{"type": TRIGGER_WORD, "value": OPEN}]}
    grammar = gbnf(fmt) if fmt else None
    return {} if grammar is None else {"grammar": grammar}


def gbnf(fmt: dict) -> str | None:
    """The GBNF grammar of a prompt row's output format (common.output_format); None for tools
    with tool_choice "none" (free text, as llama.cpp asks it)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    if "response_format" in fmt:
        rf = fmt["response_format"]
        schema = rf.get("json_schema", {}).get("schema") if rf.get("type") == "json_schema" else rf.get("schema")
        return json_schema_to_gbnf(json.dumps(schema or ANY_OBJECT))
    tools = Tools(**fmt)
    if tools.choice == "none":
        return None
    if tools.choice == "auto":
        raise ValueError("tool_choice auto needs a lazy grammar (server_fields): a plain one would force a call")
    return _calls(tools)


def _calls(tools: Tools) -> str:
    """GBNF of the answer's calls: one block, or several where the tools allow it."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    call = json_schema_to_gbnf(json.dumps({"anyOf": [tools.call_schema(n) for n in tools.callable]}))
    call = re.sub(r"^root ::=", "call ::=", call, flags=re.MULTILINE)
    block = f'"{OPEN}\\n" call "\\n{CLOSE}"'
    return f'root ::= {block}' + (f' ("\\n" {block})*' if tools.several else "") + "\n" + call
