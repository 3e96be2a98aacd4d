"""Refusals as RFC 9457 problem documents: ``{"type", "title", "status", "detail"}``, ``detail`` one line.

Every error the server answers with, bad input or its own fault, is one of these (a browser asking for a page gets the
same line in an HTML page, ``registry.server.pages``): no traceback ever reaches a client.
"""

from __future__ import annotations

import http

from fastapi.responses import JSONResponse

MEDIA_TYPE = "application/problem+json"
MAX_DETAIL = 400  # characters: a refusal is one line, not a dump of what was sent


class HttpProblem(Exception):
    """Raised anywhere in a request: the client gets ``status`` and ``detail`` as a problem document."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}


def one_line(text: str) -> str:
    """``text`` on one line, at most ``MAX_DETAIL`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_DETAIL else line[: MAX_DETAIL - 1] + "…"


def title(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def document(status: int, detail: str) -> dict:
    return {"type": "about:blank", "title": title(status), "status": status, "detail": one_line(detail)}


def response(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(document(status, detail), status_code=status, media_type=MEDIA_TYPE, headers=headers)
