"""What guards the server from one client: a request rate per client, the size of a request's header block, and the
size of an upload.

The rate is a token bucket per client address (behind a reverse proxy, uvicorn takes the address from
``X-Forwarded-For`` when the proxy is trusted: docs/SERVER.md): ``rate`` requests a second, bursts of ``burst``. A
client over it gets 429 with ``Retry-After``, before any work, and everyone else is served as before. 0 turns it off
(a load benchmark from one address, or a server only a proxy that limits already reaches).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import Request
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from registry.server import problems
from registry.server.problems import HttpProblem

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


class BoundedHeaders(HttpToolsProtocol):
    """uvicorn's HTTP protocol (httptools, its fast parser) with each request's header block bounded by the config's
    ``h11_max_incomplete_event_size``, the bound uvicorn applies only to its h11 parser: httptools keeps whatever
    arrives until the blank line, and 64 MB of header were read, and held, before any token was looked at. A block
    past the bound gets 431 and its connection is closed: one still arriving as soon as the reads that hold nothing
    else pass it (at most one read, 256 KiB, more is held), a whole one that came in a read with its end before any
    handler sees it."""

    def __init__(self, config, *args, **kwargs) -> None:
        super().__init__(config, *args, **kwargs)
        self.max_header = config.h11_max_incomplete_event_size or 16 << 10  # h11's own default
        self.received = 0  # bytes of the reads that fell within the header block being read
        self.block = 0  # bytes of its request line and headers, as the parser hands them over
        self.reading_headers = True  # False from the end of a request's headers to the end of its body
        self.events = 0  # ends of header blocks and of requests on this connection
        self.too_large = False

    def data_received(self, data: bytes) -> None:
        if self.too_large:
            return
        events = self.events
        super().data_received(data)
        # A read that also ends a header block (or a body) cannot be split: only reads wholly within one count.
        if self.events == events and self.reading_headers:
            self.received += len(data)
            self.too_large = self.too_large or self.received > self.max_header
        if self.too_large and not self.transport.is_closing():
            self._refuse()

    def on_message_begin(self) -> None:
        self.block = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self.block += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.block += len(name) + len(value) + 4  # ": " and the line's end
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.events += 1
        self.reading_headers, self.received = False, 0
        self.too_large = self.too_large or self.block > self.max_header
        if not self.too_large:  # else no handler is started: data_received answers 431
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.too_large:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self.events += 1
        self.reading_headers = True
        if not self.too_large:
            super().on_message_complete()

    def _refuse(self) -> None:
        body = json.dumps(
            problems.document(431, f"the request's header block passed {self.max_header:,} bytes, the most taken here")
        ).encode()
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: " + problems.MEDIA_TYPE.encode()
            + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body
        )  # fmt: skip
        self.transport.close()


async def bounded_stream(request: Request, limit: int, *, length_required: bool = False) -> AsyncIterator[bytes]:
    """The request's body as it arrives. Refused before a byte is read when it declares more than ``limit`` bytes
    (413), a length that is no byte count (400), or none where ``length_required`` (411); then 413 as soon as more
    than ``limit`` bytes have arrived (a chunked body declares nothing), 400 if the client goes away before its end
    (killed, or its network), so that nothing of it is used."""
    declared = request.headers.get("content-length")
    if declared is None and length_required:
        raise HttpProblem(411, "the request must declare its Content-Length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpProblem(400, "Content-Length is not a byte count")
        if int(declared) > limit:
            raise HttpProblem(413, f"the request declares {int(declared):,} bytes; this server takes at most {limit:,}")
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HttpProblem(413, f"the request passed {limit:,} bytes, the most this server takes")
            yield chunk
    except ClientDisconnect:
        raise HttpProblem(400, "the request broke off before its end; nothing of it was used") from None


async def receive_upload(request: Request, limit: int) -> Path:
    """The request's body in a temporary file (the caller deletes it), within ``limit`` bytes (``bounded_stream``)."""
    with tempfile.NamedTemporaryFile(prefix="registry-push-", suffix=".bundle", delete=False) as f:
        path = Path(f.name)
        size = 0
        try:
            async for chunk in bounded_stream(request, limit):
                size += len(chunk)
                f.write(chunk)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    if size == 0:
        path.unlink(missing_ok=True)
        raise HttpProblem(400, "the request has no body: POST a bundle (`registry export --bundle` writes one)")
    return path
