"""The web view: server-rendered pages for people, from ``templates/`` (Jinja2, every value escaped).

No script, no request to anything but this server (the styles are inline, the charts inline SVG), so every page works
without JavaScript and under a Content-Security-Policy that forbids the rest. The model page is ``registry report``'s
content (``registry.report.html.content``) inside the site's layout: one report, two outputs. A page that needs a
token the browser has not given answers with the sign-in form.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import shlex
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
from registry.store.interface import BrowseFilter, Catalogue, LookupFilter, RegistryStorage
from registry.store.query import parse_shape, parse_workload
from registry.store.rows import shapes_text
from registry.store.values import BROWSE_SORTS

MAX_LOGIN = 4096  # bytes of a sign-in form: a token and its field name
PAGE_ROWS = 50  # rows of a search page
MAX_PAGE = 10**6  # the highest page number a search takes
COMPARE_ROWS = 500  # (workload, device) pairs a comparison of two devices reads at most

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
    week = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=7)).date().isoformat()
    return page(
        request, gate, "overview.html", title="Overview", stats=stats, devices=store.devices(),
        tuned={d.id: d.tuned_workloads for d in stats.per_device}, models=model_entries(store, 20), week=week,
        info={"registry_id": store.registry_id(), "tvm_version": hostinfo.tvm_version(),
              "tool_version": hostinfo.tool_version()},
    )  # fmt: skip


_MODEL_SORTS = ("newest", "name", "coverage", "latency")


@router.get("/models", response_class=HTMLResponse)
def models(request: Request, store: Storage, gate: TokenGate, device: str | None = None, sort: str = "newest"):
    gate.check(request, "reader")
    if sort not in _MODEL_SORTS:
        raise HttpProblem(422, f"sort: {sort[:40]!r} is no order here; choose {', '.join(_MODEL_SORTS)}")
    dev = store.resolve_one_device(device) if device else None
    rows = []
    for m in model_entries(store, 1000):
        cover = [c for c in store.coverage(m.id) if dev is None or c.device_id == dev.id]
        rows.append((m, len(store.model_tasks(m.id)), cover))
    if sort == "name":
        rows.sort(key=lambda r: r[0].name)
    elif sort == "coverage":
        rows.sort(key=lambda r: -max((c.tasks / r[1] for c in r[2] if r[1]), default=0))
    elif sort == "latency":  # the fastest estimate of a device that holds every task first; the rest after
        rows.sort(key=lambda r: min((c.estimate_us for c in r[2] if c.tasks == r[1]), default=float("inf")))
    return page(
        request, gate, "models.html", title="Models", rows=rows, device=dev, devices=store.all_devices(),
        sort=sort, sorts=_MODEL_SORTS,
    )  # fmt: skip


@router.get("/models/{name:path}", response_class=HTMLResponse)
def model(request: Request, store: Storage, gate: TokenGate, reports: Reports, name: str, device: str | None = None):
    gate.check(request, "reader")
    found = store.find_models(name)
    if not found:
        raise HttpProblem(404, f"no model {name[:200]!r} in this registry")
    cover = store.coverage(found[0].id)
    if device is None and cover:  # the device with the most records of the model's tasks
        device = str(cover[0].device_id)
    data = reports.get(name, device)
    report = Markup(reports.html(name, device))
    shown = store.resolve_one_device(device).id if device else None
    return page(
        request, gate, "model.html", title=f"Model {name}", name=name, report=report, cover=cover,
        tasks=len(data.tasks), shown=shown, pull=pull_command(request, "--model", name),
    )  # fmt: skip


def pull_command(request: Request, *filters: str) -> str:
    """The command that pulls what a page shows from this server, each value quoted for a shell."""
    url = str(request.base_url).rstrip("/")
    return " ".join(["registry pull", shlex.quote(url), *(shlex.quote(f) for f in filters)])


@router.get("/search", response_class=HTMLResponse)
def search(request: Request, store: Storage, gate: TokenGate):
    gate.check(request, "reader")
    q = {k: v.strip()[:200] for k, v in request.query_params.items() if k in _SEARCH_FIELDS and v.strip()}
    found, problem, pull = None, None, None
    if set(q) - {"sort", "page"}:
        try:
            found = store.browse(_browse_filter(store, q))
        except RegistryError as e:  # a device the registry lacks: said on the page, in the form's words
            problem = one_line(e.fact)
        pull = _search_pull(request, q) if problem is None else None
    number = _page_number(q.get("page")) if problem is None and found is not None else 1
    return page(
        request, gate, "search.html", title="Search", query=_Query(q), found=found, problem=problem, pull=pull,
        page_rows=PAGE_ROWS, number=number, ops=list(store.stats().workloads_by_op), devices=store.all_devices(),
        sorts=BROWSE_SORTS, here=lambda **kw: _search_url(q, **kw),
    )  # fmt: skip


def _search_pull(request: Request, q: dict[str, str]) -> str | None:
    """The pull of what a search shows, where pull has its filters (team, model, device, since), else None."""
    filters = []
    for key in ("team", "model", "device", "since"):
        if q.get(key):
            filters += [f"--{key}", q[key]]
    return pull_command(request, *filters) if filters else None


def _search_url(q: dict[str, str], **changes) -> str:
    """This search's URL with some fields changed (None: dropped)."""
    merged = {**q, **{k: str(v) for k, v in changes.items() if v is not None}}
    for k, v in changes.items():
        if v is None:
            merged.pop(k, None)
    return "/search?" + urllib.parse.urlencode(merged)


@router.get("/workloads/{shash}", response_class=HTMLResponse)
def workload(request: Request, store: Storage, gate: TokenGate, shash: str, device: str | None = None):
    gate.check(request, "reader")
    rows = store.lookup(LookupFilter(workload=parse_workload(shash), top_k=20, limit=1000))
    if not rows:
        raise HttpProblem(404, f"no stored record of workload {shash}")
    firsts = [r for r in rows if r.rank == 1]
    if device is not None:
        wanted = {d.id for d in store.resolve_devices(device)}
        firsts = [r for r in firsts if r.device_id in wanted]
        if not firsts:
            raise HttpProblem(404, f"device {device[:40]!r} has no record of workload {shash}")
    best = min(firsts, key=lambda r: r.latency_us)
    prov = store.record_provenance(best.record_id)
    trace, is_python, note = _trace(prov)
    return page(
        request, gate, "workload.html", title=f"Workload {best.workload}", rows=rows, best=best, prov=prov,
        donor_shash=prov.donor.split(" ", 1)[0] if prov.donor else None, trace=trace, trace_is_python=is_python,
        trace_note=note, picked=device is not None, devices=sorted({(r.device_id, r.device) for r in firsts}),
        on=sorted({(r.device_id, r.device) for r in rows if r.rank == 1}), shash=shash,
    )  # fmt: skip


@router.get("/records/{record_id}", response_class=HTMLResponse)
def record(request: Request, store: Storage, gate: TokenGate, record_id: int):
    """A record as a page: its provenance and its trace, as text."""
    gate.check(request, "reader")
    if not 0 < record_id < 2**62:
        raise HttpProblem(404, f"no record {record_id}")
    prov = store.record_provenance(record_id)
    trace, is_python, note = _trace(prov)
    return page(
        request, gate, "record.html", title=f"Record {record_id}", prov=prov, trace=trace, trace_is_python=is_python,
        trace_note=note, shash=prov.workload,
        donor_shash=prov.donor.split(" ", 1)[0] if prov.donor else None,
    )  # fmt: skip


@router.get("/compare", response_class=HTMLResponse)
def compare(
    request: Request, store: Storage, gate: TokenGate, a: str | None = None, b: str | None = None,
    model: str | None = None,
):  # fmt: skip
    """Two devices side by side: per task of a model, or per workload both hold, each one's best and the ratio."""
    gate.check(request, "reader")
    listed = sorted(store.devices(), key=lambda d: (-d.records, d.id))
    a = a or (str(listed[0].id) if listed else None)
    b = b or (str(listed[1].id) if len(listed) > 1 else a)
    pair = [store.resolve_one_device(x) for x in (a, b)] if a and b else []
    rows, estimates = [], {}
    if pair:
        rows, estimates = _side_by_side(store, pair[0].id, pair[1].id, model)
    return page(
        request, gate, "compare.html", title="Compare devices", devices=store.all_devices(), pair=pair, rows=rows,
        model=model, models=store.model_names(1000), estimates=estimates, limit=COMPARE_ROWS,
    )  # fmt: skip


def _side_by_side(store: RegistryStorage, a: int, b: int, model: str | None):
    """(rows of (task, weight, workload, best on a, best on b), {device id: the model's estimate}); µs."""
    tasks = {}
    if model is not None:
        found = store.find_models(model)
        if not found:
            raise HttpProblem(404, f"no model {model[:200]!r} in this registry")
        tasks = {t.workload_id: t for t in store.model_tasks(found[0].id)}
    got = store.browse(BrowseFilter(device_ids=[a, b], model=model, limit=COMPARE_ROWS)).rows
    best: dict[str, dict[int, float]] = {}
    names: dict[str, tuple[str, str]] = {}
    for r in got:
        best.setdefault(r.workload, {})[r.device_id] = r.latency_us
        names[r.workload] = (r.task, r.op)
    weights = {}
    if tasks:
        hashes = store.workload_hashes(list(tasks))
        weights = {hashes[w]: t.weight for w, t in tasks.items() if w in hashes}
    rows = [
        (names[w][0], names[w][1], weights.get(w, 1), w, d.get(a), d.get(b))
        for w, d in best.items()
        if model is not None or (a in d and b in d)
    ]
    estimates = {}
    if tasks:
        for dev in (a, b):
            have = [r for r in rows if (r[4] if dev == a else r[5]) is not None]
            estimates[dev] = (len(have), sum(r[2] * (r[4] if dev == a else r[5]) for r in have))
    return sorted(rows, key=lambda r: (r[1], r[0])), estimates


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


_SEARCH_FIELDS = ("op", "shape", "dtype", "device", "model", "trust", "team", "since", "sort", "page")


class _Query(dict):
    """The search form's values; a field not given reads as None."""

    def __getattr__(self, name: str):
        return self.get(name)


def _page_number(text: str | None) -> int:
    if text is None:
        return 1
    if not (text.isdigit() and 1 <= int(text) <= MAX_PAGE):
        raise BadInputError(f"page: {text[:20]!r} is no page number; pages are counted from 1")
    return int(text)


def _since(text: str | None) -> dt.datetime | None:
    """A "pushed since" date or time (UTC), as the form takes it: YYYY-MM-DD or YYYY-MM-DDTHH:MM."""
    if text is None:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadInputError(f"pushed since: {text[:40]!r} is no date; write it as 2026-11-23") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _shape(text: str | None) -> tuple[int, ...] | None:
    if text is not None and not re.fullmatch(r"\d{1,18}(\s*[,x]\s*\d{1,18})*", text):
        raise BadInputError(f"argument shape: {text[:40]!r} is no shape; write its dimensions as 1,64,56,56")
    return parse_shape(text)


def _browse_filter(store: Catalogue, q: dict[str, str]) -> BrowseFilter:
    f = BrowseFilter(
        op=q.get("op"), shape=_shape(q.get("shape")), dtype=q.get("dtype"), model=q.get("model"), team=q.get("team"),
        since=_since(q.get("since")), trust="verified" if q.get("trust") == "verified" else "imported",
        sort=q.get("sort") if q.get("sort") in BROWSE_SORTS else "operator", limit=PAGE_ROWS,
    )  # fmt: skip
    f.offset = (_page_number(q.get("page")) - 1) * PAGE_ROWS
    if q.get("device"):
        try:
            f.device_ids = [d.id for d in store.resolve_devices(q["device"])]
        except RegistryError:
            raise BadInputError(f"device: no device {q['device'][:40]!r} here; pick one from the list") from None
    return f


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
