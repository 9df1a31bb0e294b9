"""Tool calls: tools rendered into the prompt, the model's calls held to the tools' parameter
schemas by a grammar, and parsed into OpenAI's `tool_calls`.

The call syntax is Qwen2.5's (Hermes'): one block per call,
`<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>`. A chat template that renders
`tools` (Qwen2.5's) gets them through it; any other model gets them in a system message worded
as Qwen2.5's template words it. tool_choice: "none" (an answer with no call), "auto" (text, or
text and then calls), "required" (calls only), or a named function (one call of it).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from edgespec.errors import EdgespecError
from edgespec.structured.grammar import JSON_STYLE, Grammar, bounded

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for function names
MAX_TOOLS = 128
# text that never opens a call: what "auto" answers with before its calls, if any
TEXT = r"/(.|\n)+/ & ~/(.|\n)*<tool_call>(.|\n)*/"
# "auto" also takes a call as Qwen2.5-Coder often writes one: the answer opening with a JSON block
# whose object starts with "name" and a tool's name (llama.cpp's Hermes parser triggers on the
# same). Such an answer is one call held to the tools' schemas, so "auto"'s text may not open so.
FENCE, FENCE_END = "```json\n", "\n```"
WS = r"[ \t\n\r]*"  # llguidance's flexible JSON whitespace
SPACE = re.compile(WS)  # JSON's whitespace, before a call's object

class ToolError(EdgespecError):
    """Tools or a tool_choice that cannot be honoured as given."""


@dataclass
class Tools:
    """What a chat request offers: OpenAI's `tools` ([{"type": "function", "function": {"name",
    "description", "parameters"}}]), `tool_choice` and `parallel_tool_calls`."""

    tools: list[dict]
    choice: Any = "auto"
    parallel: bool = True
    functions: dict[str, dict] = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tools, list) or not 1 <= len(self.tools) <= MAX_TOOLS:
            raise ToolError(f"tools must list 1 to {MAX_TOOLS} tools")
        self.functions = {}
        for i, tool in enumerate(self.tools):
            fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not NAME.fullmatch(fn["name"]):
                raise ToolError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}} "
                                "with a name of letters, digits, _ or -, at most 64")
            params = fn.get("parameters", {"type": "object", "properties": {}})
            if not isinstance(params, dict):
                raise ToolError(f"tools[{i}].function.parameters must be a JSON schema object")
            self.functions[fn["name"]] = {**fn, "parameters": params}
        self.forced_name = self._named_choice()

    def _named_choice(self) -> str | None:
        c = self.choice
        if c in ("none", "auto", "required"):
            return None
        fn = c.get("function") if isinstance(c, dict) and c.get("type") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise ToolError('tool_choice must be "none", "auto", "required" or '
                            '{"type": "function", "function": {"name": ...}}')
        if name not in self.functions:
            raise ToolError(f"tool_choice names {name!r}, which is not among the tools")
        return name

    def grammar(self) -> Grammar:
        """What the answer may be under this tool_choice."""
        if self.choice == "none":
            return Grammar.lark(f"start: TEXT\nTEXT: {TEXT}\n")
        schemas = [self.call_schema(n) for n in self.callable]
        call = {"anyOf": schemas, "x-guidance": JSON_STYLE}
        more = ' ("\\n" call)*' if self.several else ""
        rules = f'call: "{OPEN}" opened\nopened: "\\n" %json {json.dumps(call)} "\\n{CLOSE}"\n'
        if self.choice == "required" or self.forced_name:
            return Grammar.lark(f"start: call{more}\n{rules}")
        # text, then calls: the text ends at the first call's tag (a suffix lexeme: a greedy one
        # would run on past the tag, and llguidance cannot roll a stop= one back)
        not_fenced = f" & ~/{self._fence_head()}(.|\\n)*/"
        return Grammar.lark(f"start: TEXT | lead opened{more} | fenced\n{rules}TEXT: {TEXT}{not_fenced}\n"
                            f'lead[suffix="{OPEN}"]: /(.|\\n)*/{not_fenced}\n{self._fenced_rules()}')

    def _fence_head(self, name: str | None = None) -> str:
        """A JSON block's opening through the name of a call's tool (`name`, or any callable), as a
        regular expression (names are letters, digits, _ and -: nothing to escape)."""
        return r"```json\n" + WS + r"\{" + WS + '"name"' + WS + ":" + WS + f'"({name or "|".join(self.callable)})"'

    def _fenced_rules(self) -> str:
        """A call in a JSON block, its whitespace free. Its head, through the tool's name, is one
        lexeme ending where "auto"'s text may no longer go on, so the lexer reads one or the other."""
        flexible = {"whitespace_flexible": True}  # no separators: JSON_STYLE's ", " would ask a space after a comma
        rules = [f"fenced: ({' | '.join(f'fenced{i}' for i in range(len(self.callable)))}) FENCE_TAIL"]
        for i, name in enumerate(self.callable):
            arguments = {**self.call_schema(name)["properties"]["arguments"], "x-guidance": flexible}
            rules += [f'fenced{i}: HEAD{i} COMMA "\\"arguments\\"" COLON %json {json.dumps(arguments)}',
                      f"HEAD{i}: /{self._fence_head(name)}/"]
        rules += [f"COLON: /{WS}:{WS}/", f"COMMA: /{WS},{WS}/", f"FENCE_TAIL: /{WS}\\}}\\n```/"]
        return "\n".join(rules) + "\n"

    @property
    def callable(self) -> list[str]:
        """The functions a call may name under this tool_choice."""
        return [self.forced_name] if self.forced_name else list(self.functions)

    @property
    def several(self) -> bool:
        """Whether an answer may make more than one call."""
        return self.parallel and not self.forced_name

    def call_schema(self, name: str) -> dict:
        """One call's JSON, its numbers bounded as a response_format's are (grammar.bounded)."""
        return bounded({"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                        "properties": {"name": {"const": name}, "arguments": self.functions[name]["parameters"]}})

    def split(self, text: str) -> tuple[str | None, list[dict]]:
        """The answer's text before its first call (None when empty), and its calls as OpenAI's
        tool_calls, arguments as JSON text."""
        if self._fenced(text):
            return None, [_as_openai(json.loads(text[len(FENCE):-len(FENCE_END)]))]
        start = text.find(OPEN)
        if start < 0:
            return text, []
        content = text[:start]
        return content if content.strip() else None, _calls(text, start)

    def shown(self, text: str) -> int:
        """How much of an answer so far may stream as text: up to its first call, or to where a
        call may be starting."""
        if self._fenced(text, opening=True):
            return 0
        start = text.find(OPEN)
        if start >= 0:
            return start
        for n in range(min(len(OPEN) - 1, len(text)), 0, -1):
            if OPEN.startswith(text[-n:]):
                return len(text) - n
        return len(text)

    def _fenced(self, text: str, opening: bool = False) -> bool:
        """The answer is a call in a JSON block ("auto" only); `opening`: it is, or may yet be."""
        if self.choice != "auto":
            return False
        if re.match(self._fence_head(), text):
            return opening or text.endswith(FENCE_END)
        if not opening or not FENCE.startswith(text[:len(FENCE)]):
            return False
        squeezed = re.sub(WS, "", text[len(FENCE):len(FENCE) + 200])
        return any(f'{{"name":"{name}"'.startswith(squeezed) for name in self.callable)

def _calls(text: str, at: int) -> list[dict]:
    """The calls from `at` on. Each call's JSON is read as JSON, not up to the next closing tag:
    a string in it (an email's body, say) may hold that tag."""
    calls, decoder = [], json.JSONDecoder()
    while (at := text.find(OPEN, at)) >= 0:
        call, at = decoder.raw_decode(text, SPACE.match(text, at + len(OPEN)).end())
        calls.append(_as_openai(call))
    return calls


def _as_openai(call: dict) -> dict:
    """OpenAI's tool call of one call's JSON (arguments as JSON text)."""
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}


def with_tools(messages: list[dict], tools: Tools, template_renders_tools: bool) -> tuple[list[dict], list | None]:
    """The messages as the chat template reads them, and the tools to pass it (None: written
    into the system message here). An assistant's earlier calls: arguments as objects."""
    out = [_as_template_reads(m, template_renders_tools) for m in messages]
    if template_renders_tools:
        return out, tools.tools
    offer = _offer(tools)
    if out and out[0].get("role") == "system":
        out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{offer}".strip()}
    else:
        out.insert(0, {"role": "system", "content": offer})
    return out, None


def _as_template_reads(m: dict, template_renders_tools: bool) -> dict:
    calls = m.get("tool_calls")
    if m.get("role") != "assistant" or not calls:
        return m if m.get("content") is not None else {**m, "content": ""}
    parsed = []
    for c in calls:
        fn = c.get("function", c) if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ToolError("an earlier tool call must be {\"function\": {\"name\": ..., \"arguments\": ...}}")
        args = fn.get("arguments", {})
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            raise ToolError(f"an earlier tool call's arguments are not JSON: {args[:80]!r}") from None
        parsed.append({"name": fn.get("name"), "arguments": args})
    if template_renders_tools:
        return {**m, "content": m.get("content") or "", "tool_calls": [{"function": c} for c in parsed]}
    blocks = "\n".join(f"{OPEN}\n{json.dumps(c, ensure_ascii=False)}\n{CLOSE}" for c in parsed)
    return {"role": "assistant", "content": f"{m.get('content') or ''}\n{blocks}".strip()}


def _offer(tools: Tools) -> str:
    """The tools as Qwen2.5's chat template offers them."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools.tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listed}\n"
            "</tools>\n\nFor each function call, return a json object with function name and arguments within "
            f'{OPEN}{CLOSE} XML tags:\n{OPEN}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{CLOSE}')
