"""Structured output: what an answer is held to (a JSON schema, OpenAI's response_format, tools)
and the grammar-backed constraint the engine follows."""
