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


# -- what the OpenAPI schema says of them ------------------------------------------------------------------------------

SCHEMA_NAME = "Problem"
SCHEMA = {
    "title": SCHEMA_NAME,
    "type": "object",
    "description": "An RFC 9457 problem document: every refusal and every fault of the server is one.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "description": "Always about:blank: the status says what kind of problem."},
        "title": {"type": "string", "description": "The status's phrase."},
        "status": {"type": "integer", "description": "The HTTP status, as sent."},
        "detail": {"type": "string", "maxLength": MAX_DETAIL, "description": "What was wrong, on one line."},
    },
}
WHY = {
    400: "The request asks what the registry refuses: an unknown query parameter, a control character, a bad bundle.",
    401: "No token, or one that is not valid (expired, revoked, unknown): send 'Authorization: Bearer TOKEN'.",
    403: "The token's role is short of the one the route needs.",
    404: "Nothing of that name or id, or filters that match no record.",
    411: "The request's body does not declare its length (Content-Length).",
    413: "The upload or request body is larger than the server's limit.",
    422: "A parameter's value is not of its type or out of its range.",
    429: "Too many requests from this client: retry after the Retry-After header's seconds.",
    503: "The registry's database is not answering.",
}
# What every route of the API may answer: its query checked, its token checked, the rate limit, the database.
COMMON = (400, 401, 403, 429, 503)


def responses(*statuses: int) -> dict[int | str, dict]:
    """The ``responses`` of a route (FastAPI's argument) for these error statuses and ``COMMON``: each a problem
    document, so that the schema documents what the server sends (and no 422 of FastAPI's own shape)."""
    ref = {"$ref": f"#/components/schemas/{SCHEMA_NAME}"}
    return {
        s: {"description": WHY[s], "content": {MEDIA_TYPE: {"schema": ref}}}
        for s in sorted(set(COMMON) | set(statuses))
    }
