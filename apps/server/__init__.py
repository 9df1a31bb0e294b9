"""`edgespec serve`: an OpenAI-compatible local server over the public API.

`app.py` (routes, streaming, the socket), `protocol.py` (OpenAI's request and
reply objects), `worker.py` (the threads that prepare prompts and own the model),
`guard.py` (local clients only, without a key), `metrics.py` (/metrics).
"""

from edgespec.apps.server.app import Limits, LocalServer, create_app

__all__ = ["Limits", "LocalServer", "create_app"]
