"""The ASGI application of ``registry serve``: the JSON API, the web view, and one answer for every error.

``create_app`` builds it over a ``RegistryStorage``; ``from_environment`` is the factory uvicorn calls in each worker
process (``registry serve --workers N``), configured by the ``REGISTRY_SERVE_*`` variables ``registry serve`` sets.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import urllib.parse
from dataclasses import asdict, dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from registry import hostinfo
from registry.errors import DatabaseError, RegistryError
from registry.options import SERVE
from registry.server import api, leases_api, pages, problems, state, storage_api
from registry.server.auth import COOKIE
from registry.server.limits import BoundedHeaders, RateLimit
from registry.server.problems import HttpProblem, one_line
from registry.store.factory import open_storage
from registry.store.interface import RegistryStorage

log = logging.getLogger("registry.server")

ENVIRONMENT = "REGISTRY_SERVE_CONFIG"

# Pages load nothing but themselves: no script, no font, no image but inline SVG and data: URLs, no frame.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no address leaves the site; a form posted here names its origin
    "X-Frame-Options": "DENY",
}
# An answer that depends on the token asked with is kept by no cache (a proxy's or the browser's), and every answer
# says that the token headers change it, so that a cache never gives a signed-in answer to anyone else.
PRIVATE = [(b"cache-control", b"no-store")]
VARY = (b"vary", b"Authorization, Cookie")
TOKENS_PATH = "/api/v1/tokens"  # the token list: an admin's, whoever asks
# C0 and C1 controls and DEL: in no name or filter value the registry keeps, and PostgreSQL refuses a NUL in text.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class ServeConfig:
    db: str | None = None  # the registry's URL (default: as every command resolves it)
    public: bool = SERVE.public  # requests without a token may read
    max_upload: int = SERVE.max_upload  # bytes of one pushed bundle
    rate: float = SERVE.rate_limit  # requests a second per client; 0: no limit
    burst: int = 200  # requests a client may send at once before the rate applies
    # Requests a worker process works on at once (its threads); the rest wait in its event loop. More threads than
    # cores only contend for the GIL and the database's pool: 32 clients on 2 cores served half the requests a
    # second with 40 threads (FastAPI's default) that they did with 8 (docs/BENCHMARKS.md, "Serving over HTTP").
    threads: int = 8
    # Bytes of one request's header block (request line and headers); a larger one gets 431, having been read no
    # further. A browser's cookies and a bearer token take a few KiB; nginx's default is 32 KiB, too.
    max_header: int = SERVE.max_header


def create_app(config: ServeConfig, store: RegistryStorage | None = None) -> FastAPI:
    store = store or open_storage(config.db, create_new=False)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = config.threads
        yield
        store.close()  # the connections go back when the server stops

    app = FastAPI(
        lifespan=lifespan,
        title="tvm-registry",
        version=hostinfo.tool_version(),
        summary="Tuned MetaSchedule schedules of a TVM registry: lookup, models, records, pull and push.",
        docs_url=None,  # the interactive pages load their script from a CDN: only the schema is served
        redoc_url=None,
        openapi_url="/openapi.json",
        generate_unique_id_function=operation_id,
        openapi_tags=TAGS,
    )
    app.openapi = lambda: openapi_schema(app, public=config.public)
    state.keep(app.state, store, public=config.public, max_upload=config.max_upload)
    app.include_router(api.router)
    app.include_router(storage_api.router)
    app.include_router(leases_api.router)
    app.include_router(pages.router)
    app.add_exception_handler(HttpProblem, _problem)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(RegistryError, _refused)

    app.add_middleware(RateLimit, rate=config.rate, burst=config.burst)
    app.add_middleware(Guard)  # added last, outermost: its headers on every answer, a 429 too
    return app


TAGS = [
    {"name": "registry", "description": "What the registry is and holds: its id, counts, devices."},
    {"name": "records", "description": "Lookup: the best records of workloads, a record with its provenance."},
    {"name": "models", "description": "Models and their reports: tasks, records, curves."},
    {"name": "sharing", "description": "Pull (pages of bundles) and push (a bundle) between registries."},
    {"name": "tokens", "description": "The tokens the server admits: an admin's."},
    {"name": "tuning", "description": "Tuning machines that share the server: their tasks, leases and effort."},
]
SECURITY_SCHEME = "bearerAuth"


def operation_id(route) -> str:
    """A route's operation id where it names none: its function's name in camel case (``model_page`` ->
    ``modelPage``), not FastAPI's ``model_page_models__name__get``."""
    head, *rest = route.name.split("_")
    return head + "".join(w.title() for w in rest)


def openapi_schema(app: FastAPI, public: bool) -> dict:
    """FastAPI's schema of the app, made to say what the server does: the bearer token each route of the API needs
    (none for a read of a ``--public`` server), and its refusals as problem documents (``problems.SCHEMA``), not
    FastAPI's ``HTTPValidationError``, which the server never sends."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    from fastapi.openapi.utils import get_openapi

    spec = get_openapi(
        title=app.title, version=app.version, summary=app.summary, routes=app.routes, tags=app.openapi_tags
    )
    components = spec.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas[problems.SCHEMA_NAME] = problems.SCHEMA
    components["securitySchemes"] = {
        SECURITY_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "A token `registry token create` made (`rgt_...`): a reader's reads, a writer's pushes, "
            "an admin's lists and revokes tokens.",
        }
    }
    for path, operations in spec.get("paths", {}).items():
        for method, operation in operations.items():
            for status, said in operation.get("responses", {}).items():
                if "HTTPValidationError" in json.dumps(said):  # a route that lists no 422 of its own
                    operation["responses"][status] = problems.responses(int(status))[int(status)]
            if path.startswith("/api/"):
                anyone = public and method == "get" and "/tokens" not in path and "/sync-state" not in path
                operation["security"] = [{SECURITY_SCHEME: []}, *([{}] if anyone else [])]
    app.openapi_schema = spec
    return spec


class Guard:
    """ASGI middleware: the security and cache headers on every answer, text with control characters refused before
    any handler sees it, and a fault of ours as one line in the log and one problem document to the client, never a
    traceback (a plain ASGI class: FastAPI's ``@app.middleware`` costs a task and a queue per request, a tenth of a
    lookup's time)."""

    def __init__(self, app) -> None:
        self.app = app
        self.headers = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        private = _private(scope)

        async def send_guarded(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = message.get("headers", [])
                have = {k.lower() for k, _ in headers}
                if private or b"set-cookie" in have:
                    headers = [h for h in headers if h[0].lower() != b"cache-control"] + PRIVATE
                message["headers"] = [*headers, VARY, *(h for h in self.headers if h[0] not in have)]
            await send(message)

        refusal = _control_character(scope)
        if refusal is not None:  # before the rate limit and every handler: it costs nothing, and reaches no database
            await answer(Request(scope), 400, refusal)(scope, receive, send_guarded)
            return
        try:
            await self.app(scope, receive, send_guarded)
        except Exception as e:  # noqa: BLE001 - a fault of ours: one line in the log, one problem document out
            request = Request(scope)
            log.error("internal error on %s %s: %s: %s", request.method, request.url.path, type(e).__name__, e)
            if os.environ.get("REGISTRY_DEBUG"):
                log.exception("the traceback (REGISTRY_DEBUG is set)", exc_info=e)
            if not started:
                await answer(request, 500, "internal error: the server's log has its cause")(
                    scope, receive, send_guarded
                )


def _private(scope) -> bool:
    """Whether the answer depends on a token: the request names one (a bearer token, the sign-in cookie), or asks
    for the token list."""
    if scope["path"].startswith(TOKENS_PATH):
        return True
    for name, value in scope["headers"]:
        if name == b"authorization" or (name == b"cookie" and COOKIE.encode() in value):
            return True
    return False


def _control_character(scope) -> str | None:
    """Why the request's path or query holds text no name or filter may hold (a control character, a NUL that
    PostgreSQL refuses in text); None when it holds none. One check for every endpoint and page."""
    found = CONTROL.search(scope["path"])
    if found:
        return f"the path holds a control character (U+{ord(found.group()):04X}): names are printable text"
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        found = CONTROL.search(name) or CONTROL.search(value)
        if found:
            return (
                f"query parameter {name[:40]!r} holds a control character (U+{ord(found.group()):04X}): names and "
                "filters are printable text"
            )
    return None


def uvicorn_options(config: ServeConfig) -> dict:
    """What ``registry serve`` gives uvicorn beyond the app: the header bound, kept by either of its parsers (h11's
    own setting; httptools, uvicorn's default, through ``BoundedHeaders``)."""
    return {"http": BoundedHeaders, "h11_max_incomplete_event_size": config.max_header}


def answer(request: Request, status: int, detail: str, headers: dict | None = None) -> Response:
    """A refusal as one problem document, or, for a browser asking for a page, the same line in a page (the sign-in
    form for a 401). ``request.app`` is the app even in ``Guard``, outside the routing: Starlette sets it first."""
    if _wants_page(request):
        gate = request.app.state.gate
        if status == 401:
            page = pages.page(request, gate, "login.html", 401, title="Sign in", problem=one_line(detail))
        else:
            page = pages.page(
                request, gate, "error.html", status, title=problems.title(status), detail=one_line(detail)
            )
        for k, v in (headers or {}).items():
            page.headers[k] = v
        return page
    return problems.response(status, detail, headers)


async def _problem(request: Request, e: HttpProblem) -> Response:
    return answer(request, e.status, e.detail, e.headers)


async def _http_error(request: Request, e: HTTPException) -> Response:
    detail = e.detail if isinstance(e.detail, str) and e.status_code != 404 else None
    if e.status_code == 404:
        detail = f"nothing at {request.url.path[:200]} (the API is under /api/v1: /openapi.json lists it)"
    return answer(request, e.status_code, detail or problems.title(e.status_code), dict(e.headers or {}))


async def _invalid(request: Request, e: RequestValidationError) -> Response:
    first = e.errors()[0] if e.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "path", "body"))
    return answer(request, 422, f"{where or 'request'}: {first.get('msg', 'invalid')}")


async def _refused(request: Request, e: RegistryError) -> Response:
    """The error's own HTTP status and its fact: the command line's hint names a flag no client of the server
    has."""
    if isinstance(e, DatabaseError):  # its text names the database: the log's, not the client's
        log.error("database error on %s %s: %s", request.method, request.url.path, e)
        return answer(
            request, e.http_status, "the registry's database is not answering; the server's log has its cause"
        )
    return answer(request, e.http_status, e.fact)


def _wants_page(request: Request) -> bool:
    path = request.url.path
    if path.startswith("/api/") or path == "/openapi.json":
        return False
    return "text/html" in request.headers.get("accept", "")


def from_environment() -> FastAPI:
    """The app as configured by ``registry serve`` in ``$REGISTRY_SERVE_CONFIG`` (JSON of a ``ServeConfig``)."""
    return create_app(ServeConfig(**json.loads(os.environ.get(ENVIRONMENT, "{}"))))


def environment(config: ServeConfig) -> dict[str, str]:
    return {ENVIRONMENT: json.dumps(asdict(config))}
