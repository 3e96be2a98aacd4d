"""What guards the server from one client: a request rate per client, and the size of an upload.

The rate is a token bucket per client address (behind a reverse proxy, uvicorn takes the address from
``X-Forwarded-For`` when the proxy is trusted: docs/SERVER.md): ``rate`` requests a second, bursts of ``burst``. A
client over it gets 429 with ``Retry-After``, before any work, and everyone else is served as before. 0 turns it off
(a load benchmark from one address, or a server only a proxy that limits already reaches).
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

from fastapi import Request
from starlette.requests import ClientDisconnect

from registry.server import problems
from registry.server.problems import Problem

MAX_CLIENTS = 10_000  # buckets kept; beyond it the full ones (clients idle long enough) are dropped


class RateLimit:
    """ASGI middleware: a token bucket per client address."""

    def __init__(self, app, rate: float, burst: int) -> None:
        self.app = app
        self.rate = rate
        self.burst = max(burst, 1)
        self.buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.rate <= 0:
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        wait = self._take(client, time.monotonic())
        if wait:
            refusal = problems.response(
                429, f"too many requests from {client}: at most {self.rate:g} a second", {"Retry-After": str(wait)}
            )
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _take(self, client: str, now: float) -> int:
        """0 when the request may go ahead, else the whole seconds until it may."""
        tokens, at = self.buckets.get(client, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens < 1:
            self.buckets[client] = (tokens, now)
            return max(1, math.ceil((1 - tokens) / self.rate))
        self.buckets[client] = (tokens - 1, now)
        if len(self.buckets) > MAX_CLIENTS:
            self._forget_idle(now)
        return 0

    def _forget_idle(self, now: float) -> None:
        full = [c for c, (t, at) in self.buckets.items() if t + (now - at) * self.rate >= self.burst]
        for c in full:
            del self.buckets[c]


async def receive_upload(request: Request, limit: int) -> Path:
    """The request's body in a temporary file (the caller deletes it). Refused with 413 before a byte is read when
    it declares more than ``limit`` bytes, and as soon as more arrive when it declares nothing (chunked)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise Problem(400, "Content-Length is not a byte count")
        if int(declared) > limit:
            raise Problem(413, f"the upload declares {int(declared):,} bytes; this server takes at most {limit:,}")
    with tempfile.NamedTemporaryFile(prefix="registry-push-", suffix=".bundle", delete=False) as f:
        path = Path(f.name)
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise Problem(413, f"the upload passed {limit:,} bytes, the most this server takes")
                f.write(chunk)
        except ClientDisconnect:  # the pusher went away (killed, or its network): nothing was imported
            path.unlink(missing_ok=True)
            raise Problem(400, "the upload broke off before its end; nothing of it was imported") from None
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    if size == 0:
        path.unlink(missing_ok=True)
        raise Problem(400, "the request has no body: POST a bundle (`registry export --bundle` writes one)")
    return path
