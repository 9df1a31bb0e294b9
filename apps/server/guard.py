"""Without an API key, the server answers only what a local client would send.

A web page the user visits can reach a loopback server: through DNS rebinding
its own domain comes to resolve to 127.0.0.1 (Ollama's CVE-2024-28224), and a
form or `text/plain` POST is a "simple" request that browsers send without a
CORS preflight. So unless a key is required, a request must name loopback or
the bound address (or an --allowed-host) in its Host header, and a body must
be declared `application/json`, which no page can send cross-origin unasked.
"""

from __future__ import annotations

from typing import Any

from edgespec.apps.server.protocol import ApiError

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def host_name(header: str) -> str:
    """'127.0.0.1:8080' -> '127.0.0.1', '[::1]:80' -> '::1', 'Example.COM.' -> 'example.com'."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0].rstrip(".") if header.count(":") == 1 else header.rstrip(".")


class LocalOnly:
    """ASGI middleware refusing foreign Host headers (403) and non-JSON bodies (415)."""

    def __init__(self, app: Any, hosts: set[str]) -> None:
        self.app, self.hosts = app, LOOPBACK | {host_name(h) for h in hosts}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: dict) -> ApiError | None:
        headers = {k.lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = host_name(headers.get(b"host", ""))
        if host not in self.hosts:
            return ApiError(403, f"this server answers requests for {', '.join(sorted(self.hosts))}, not {host!r} "
                                 "(start it with --allowed-host NAME or --api-key KEY)", code="host_not_allowed")
        media = headers.get(b"content-type", "").split(";")[0].strip().lower()
        if scope["method"] == "POST" and media != "application/json":
            return ApiError(415, f"request bodies must be application/json, not {media or 'undeclared'!r}",
                            code="unsupported_media_type")
        return None
