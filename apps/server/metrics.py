"""/metrics in Prometheus' text format, as llama-server's --metrics serves it:
requests by status, tokens generated, drafted and accepted, queue depth, memory."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psutil

PREFIX = "edgespec"


class StatusCounter:
    """ASGI middleware counting responses by route and status."""

    def __init__(self, app: Any, counts: Counter) -> None:
        self.app, self.counts = app, counts

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                self.counts[(scope["path"] if scope["path"] in ROUTES else "other", message["status"])] += 1
            await send(message)

        await self.app(scope, receive, counted)


ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")


def render(requests: Counter, worker: Any, preparing: int) -> str:
    lines = [f"# TYPE {PREFIX}_requests_total counter"]
    lines += [f'{PREFIX}_requests_total{{path="{path}",status="{status}"}} {n}'
              for (path, status), n in sorted(requests.items())]
    for name, value in worker.totals.items():
        lines += [f"# TYPE {PREFIX}_{name}_total counter", f"{PREFIX}_{name}_total {value}"]
    for outcome, value in worker.counts.items():
        lines += [f'{PREFIX}_jobs_total{{outcome="{outcome}"}} {value}']
    gauges = {"queue_depth": worker.jobs.qsize(), "busy": int(worker.running is not None),
              "prompts_preparing": preparing, "resident_memory_bytes": psutil.Process().memory_info().rss}
    for name, value in gauges.items():
        lines += [f"# TYPE {PREFIX}_{name} gauge", f"{PREFIX}_{name} {value}"]
    return "\n".join(lines) + "\n"
