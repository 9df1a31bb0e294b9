"""`edgespec serve`: an OpenAI-compatible local server over the public API.

`app.py` (routes, streaming, the socket), `protocol.py` (OpenAI's request and
reply objects), `worker.py` (the thread that owns the model).
"""

from .app import Limits, LocalServer, create_app

__all__ = ["Limits", "LocalServer", "create_app"]
