"""Errors a user can fix. The CLI prints their message on one line, without a traceback."""


class EdgespecError(Exception):
    """Base class: the message is written for the user."""


class ModelError(EdgespecError):
    """A model is missing, unknown, truncated or corrupt."""


class ContextOverflowError(EdgespecError):
    """A prompt does not fit in the context window."""


class DrafterError(EdgespecError):
    """A drafter name or configuration cannot be used."""
