"""The web view: server-rendered pages for people, from ``templates/`` (Jinja2, every value escaped).

No script, no request to anything but this server (the styles are inline, the charts inline SVG), so every page works
without JavaScript and under a Content-Security-Policy that forbids the rest. The model page is ``registry report``'s
content (``registry.report.html.content``) inside the site's layout: one report, two outputs. A page that needs a
token the browser has not given answers with the sign-in form.
"""

from __future__ import annotations

import functools
import urllib.parse

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from markupsafe import Markup

from registry import hostinfo
from registry.errors import BadInputError, RegistryError
from registry.report.html import CSS
from registry.server import auth
from registry.server.api import model_entries
from registry.server.auth import Gate
from registry.server.problems import HttpProblem, one_line
from registry.server.state import Reports, Storage, TokenGate
from registry.store.interface import Catalogue, LookupFilter
from registry.store.query import parse_shape, parse_workload
from registry.store.rows import shapes_text

MAX_LOGIN = 4096  # bytes of a sign-in form: a token and its field name
SEARCH_LIMIT = 200

templates = jinja2.Environment(
    loader=jinja2.PackageLoader("registry.server", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,  # a name a template misspells fails its test, not silently renders nothing
)
templates.globals.update(report_css=Markup(CSS), shapes=shapes_text)
# A name in a URL's path, "/" and "." encoded too: a model named ".." or "a/../b" must not lead elsewhere.
templates.filters["segment"] = lambda text: urllib.parse.quote(str(text), safe="").replace(".", "%2E")


def page(request: Request, gate: Gate, template: str, /, status: int = 200, **values) -> HTMLResponse:
    html = templates.get_template(template).render(role=gate.role_of(request), public=gate.public, **values)
    return HTMLResponse(html, status_code=status)


router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def overview(request: Request, store: Storage, gate: TokenGate):
    gate.check(request, "reader")
    stats = store.stats()
    return page(
        request, gate, "overview.html", title="Overview", stats=stats, devices=store.devices(),
        tuned={d.id: d.tuned_workloads for d in stats.per_device}, models=model_entries(store, 20),
        info={"registry_id": store.registry_id(), "tvm_version": hostinfo.tvm_version(),
              "tool_version": hostinfo.tool_version()},
    )  # fmt: skip


@router.get("/models", response_class=HTMLResponse)
def models(request: Request, store: Storage, gate: TokenGate):
    gate.check(request, "reader")
    return page(request, gate, "models.html", title="Models", models=model_entries(store, 1000))


@router.get("/models/{name:path}", response_class=HTMLResponse)
def model(request: Request, gate: TokenGate, reports: Reports, name: str, device: str | None = None):
    gate.check(request, "reader")
    report = Markup(reports.html(name, device))
    return page(request, gate, "model.html", title=f"Model {name}", name=name, report=report)


@router.get("/search", response_class=HTMLResponse)
def search(request: Request, store: Storage, gate: TokenGate):
    gate.check(request, "reader")
    q = {k: v.strip() for k, v in request.query_params.items() if k in _SEARCH_FIELDS and v.strip()}
    rows, problem = None, None
    if q:
        try:
            rows = _lookup(store, q)
        except RegistryError as e:  # a shape that is no shape, an unknown device: said on the page
            problem = one_line(e.fact)
    return page(
        request, gate, "search.html", title="Search", query=_Query(q), rows=rows, problem=problem,
        limit=SEARCH_LIMIT, ops=list(store.stats().workloads_by_op), devices=store.all_devices(),
    )  # fmt: skip


@router.get("/workloads/{shash}", response_class=HTMLResponse)
def workload(request: Request, store: Storage, gate: TokenGate, shash: str):
    gate.check(request, "reader")
    rows = store.lookup(LookupFilter(workload=parse_workload(shash), top_k=20, limit=1000))
    if not rows:
        raise HttpProblem(404, f"no stored record of workload {shash}")
    best = min((r for r in rows if r.rank == 1), key=lambda r: r.latency_us)
    prov = store.record_provenance(best.record_id)
    trace, is_python, note = _trace(prov)
    return page(
        request, gate, "workload.html", title=f"Workload {best.workload}", rows=rows, best=best, prov=prov,
        donor_shash=prov.donor.split(" ", 1)[0] if prov.donor else None, trace=trace, trace_is_python=is_python,
        trace_note=note,
    )  # fmt: skip


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, gate: TokenGate):
    return page(request, gate, "login.html", title="Sign in", problem=None)


@router.post("/login")
async def login(request: Request, gate: TokenGate):
    _same_origin(request)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_LOGIN:
            raise HttpProblem(413, f"a sign-in form is at most {MAX_LOGIN} bytes")
    token = urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0].strip()
    found = gate.stored(token) if token else None
    refused = auth.refusal_of(found)
    if refused is not None:
        known = found is not None and found.revoked_at is None  # expired: say so, and when
        problem = f"Not signed in: {refused}." if known else "That token is not valid here."
        return page(request, gate, "login.html", 401, title="Sign in", problem=problem)
    done = RedirectResponse("/", status_code=303)
    done.set_cookie(
        auth.COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/"
    )
    return done


@router.post("/logout")
def logout(request: Request):
    _same_origin(request)
    done = RedirectResponse("/", status_code=303)
    done.delete_cookie(auth.COOKIE, path="/")
    return done


def _same_origin(request: Request) -> None:
    """A form is taken only when the request proves it comes from this site's own pages: a browser's
    ``Sec-Fetch-Site: same-origin``, or (an older browser, which sends no Sec-Fetch-Site) an ``Origin`` that is this
    server's own. Anything else could sign a browser in as someone else, or out: another site's form, a sandboxed
    frame or a redirect (``Origin: null``), a request that names no origin."""
    fetched_from = request.headers.get("sec-fetch-site")
    if fetched_from is not None:
        same = fetched_from == "same-origin"
    else:
        host = request.headers.get("host", "")
        same = request.headers.get("origin", "").lower() == f"{request.url.scheme}://{host}".lower()
    if not same:
        raise HttpProblem(403, "a sign-in form is taken only from this site's own pages")


_SEARCH_FIELDS = ("op", "shape", "dtype", "device", "model", "trust")


class _Query(dict):
    """The search form's values; a field not given reads as None."""

    def __getattr__(self, name: str):
        return self.get(name)


def _lookup(store: Catalogue, q: dict[str, str]):
    f = LookupFilter(
        op=q.get("op"), shape=parse_shape(q.get("shape")), dtype=q.get("dtype"), model=q.get("model"),
        limit=SEARCH_LIMIT, trust="verified" if q.get("trust") == "verified" else "imported",
    )  # fmt: skip
    f.device_ids = [d.id for d in store.resolve_devices(q["device"])] if q.get("device") else None
    return store.lookup(f)


def _trace(prov) -> tuple[str, bool, str | None]:
    """(text, whether it is Python, a note): the trace as Python where it replays on this TVM, else as stored."""
    try:
        return _as_python(prov.record.id, prov.mod_json, prov.record.trace_json, prov.workload), True, None
    except BadInputError as e:
        return prov.record.trace_json, False, f"Shown as stored: {one_line(str(e))}."


@functools.lru_cache(maxsize=256)
def _as_python(record_id: int, mod_json: str, trace_json: str, workload: str) -> str:
    """The trace as Python, cached (a record never changes). TVM is imported here, on the first workload page: the
    rest of the server never needs it to read."""
    from registry.tvm_side.apply_trace import schedule_text

    return schedule_text(mod_json, trace_json, workload=workload, record_id=record_id)[1]
