"""A model's chat template, rendered as transformers renders it (Jinja) but in a sandbox
and against a deadline: the template comes from the model file, which anyone may have written."""

from __future__ import annotations

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from edgespec.deadline import DeadlineExceeded, within
from edgespec.errors import EdgespecError

TEMPLATE_BUDGET_S = 1.0  # a chat template renders in milliseconds; past this it is a loop bomb


class ChatTemplate:
    """Compiled once: a chat renders it every turn, and compiling each time costs
    milliseconds and leaves parser garbage behind in a long session."""

    def __init__(self, source: str | None) -> None:
        if not source:
            raise EdgespecError("this model ships no chat template; use generate() with a plain prompt")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        try:
            self._template = env.from_string(source)
        except TemplateError as e:
            raise EdgespecError(f"chat template error: {e}") from None

    def render(self, **values) -> str:
        """The template on `values` (messages, add_generation_prompt, tools, bos_token, eos_token)."""
        try:
            return within(TEMPLATE_BUDGET_S, lambda: self._template.render(**values))
        except TemplateError as e:
            raise EdgespecError(f"chat template error: {e}") from None
        except DeadlineExceeded:
            raise EdgespecError(f"the model's chat template renders for over {TEMPLATE_BUDGET_S:g} s "
                                "on these messages") from None


def _raise(msg: str) -> None:
    """The templates' own way to refuse a conversation (transformers gives them the same)."""
    raise TemplateError(msg)
