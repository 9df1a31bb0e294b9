"""What a structured prompt asks of llama.cpp's own rows (llama-server, llama-cpp-python): the
same JSON schema or tool calls as a GBNF grammar, llama.cpp's format, through its own
json_schema_to_gbnf. edgespec's rows follow the prompt's format through llguidance."""

from __future__ import annotations

import json
import re

from edgespec.structured.tools import CLOSE, OPEN, Tools

ANY_OBJECT = {"type": "object"}


def gbnf(fmt: dict) -> str:
    """The GBNF grammar of a prompt row's output format (common.output_format)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    if "response_format" in fmt:
        rf = fmt["response_format"]
        schema = rf.get("json_schema", {}).get("schema") if rf.get("type") == "json_schema" else rf.get("schema")
        return json_schema_to_gbnf(json.dumps(schema or ANY_OBJECT))
    tools = Tools(**fmt)
    if tools.choice not in ("required",) and not tools.forced_name:
        raise ValueError("a bench prompt with tools asks for tool_choice required or a named function")
    call = json_schema_to_gbnf(json.dumps({"anyOf": [tools.call_schema(n) for n in tools.callable]}))
    call = re.sub(r"^root ::=", "call ::=", call, flags=re.MULTILINE)
    block = f'"{OPEN}\\n" call "\\n{CLOSE}"'
    return f'root ::= {block}' + (f' ("\\n" {block})*' if tools.several else "") + "\n" + call
