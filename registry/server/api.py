"""The JSON API, ``/api/v1``: what the CLI reads, by URL, in the shapes its ``--json`` prints.

Reads need a reader's token (none on a ``--public`` server); ``POST /bundles`` a writer's; ``/tokens`` an admin's.
Every handler is a plain function: FastAPI runs it in its thread pool, so a slow query holds one thread, not the event
loop. Each finishes its reading before it answers (a bundle is written to a temporary file first), so no database
transaction stays open while a slow client takes the answer.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathPart
from fastapi.responses import FileResponse, Response
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from registry import hostinfo, schemas
from registry.server.limits import receive_upload
from registry.server.problems import HttpProblem, responses
from registry.server.state import Reader, Reports, RequestLimits, Storage, TokenGate, Writer, admin, reader, writer
from registry.share.export import exchange_filters, held, unmatched
from registry.store.interface import (
    BrowseFilter,
    Catalogue,
    LookupFilter,
    RecordStorage,
    RegistryStorage,
    Tokens,
)
from registry.store.query import parse_shape, parse_workload
from registry.store.rows import utc_text
from registry.store.values import ExchangeFilters, TokenRow

PAGE = 20_000  # records per bundle page of a pull, by default
MAX_PAGE = 100_000
MAX_ROWS = 10_000  # rows of one lookup, as `registry lookup --limit` allows
BINARY = {"type": "string", "format": "binary"}
PAGE_HEADERS = {
    "X-Total-Count": {"description": "The (workload, device) pairs that match, in all.", "schema": {"type": "integer"}},
    "Link": {"description": 'The next page, `<URL>; rel="next"`, while there is one.', "schema": {"type": "string"}},
}

Text = Annotated[str | None, Query(max_length=200)]


async def known_query(request: Request) -> None:
    """Refuses (400) a query parameter the route does not declare: a misspelt filter (``?team=`` where there is no
    team filter) would otherwise be ignored, and the answer hold every row, as if it had matched."""
    route = request.scope.get("route")
    known = _query_names(route) if route is not None else None
    unknown = [] if known is None else [k for k in request.query_params if k not in known]
    if unknown:
        takes = f"takes {', '.join(sorted(known))}" if known else "takes no query parameter"
        raise HttpProblem(
            400, f"unknown query parameter {unknown[0][:40]!r}: {request.url.path[:120]} {takes}"
        )  # fmt: skip


def _query_names(route) -> frozenset[str] | None:
    """The query parameters a route declares, its dependencies' included (None: a route without FastAPI's
    dependency tree), worked out once per route and kept on it."""
    names = getattr(route, "registry_query_names", None)
    dependant = getattr(route, "dependant", None)
    if names is None and dependant is not None:
        found, todo = set(), [dependant]
        while todo:
            d = todo.pop()
            found |= {p.alias for p in d.query_params}
            todo.extend(d.dependencies)
        names = route.registry_query_names = frozenset(found)
    return names


# Checked in this order: the query's names (no database), then the token.
router = APIRouter(prefix="/api/v1", dependencies=[Depends(known_query), Depends(reader)])


@router.get(
    "/registry", response_model=schemas.ServerInfoOutput, tags=["registry"], operation_id="getRegistry",
    responses=responses(),
)  # fmt: skip
def registry_info(store: Storage, gate: TokenGate, token: Reader):
    return schemas.ServerInfoOutput(
        registry_id=store.registry_id(), schema_revision=store.schema_revision(),
        tool_version=hostinfo.tool_version(), tvm_version=hostinfo.tvm_version(), public=gate.public,
        role=None if token is None else token.role,
    )  # fmt: skip


@router.get(
    "/stats", response_model=schemas.StatsOutput, tags=["registry"], operation_id="getStats", responses=responses()
)
def stats(request: Request, store: Storage):
    # the server's own address, not its database's: a client has no business with the database URL
    return schemas.StatsOutput(database=str(request.base_url), **dataclasses.asdict(store.stats()))


@router.get(
    "/devices", response_model=schemas.DevicesOutput, tags=["registry"], operation_id="listDevices",
    responses=responses(),
)  # fmt: skip
def devices(store: Storage):
    return schemas.DevicesOutput(rows=[dataclasses.asdict(d) for d in store.devices()])


@router.get(
    "/workloads", response_model=schemas.LookupOutput, tags=["records"], operation_id="listWorkloads",
    responses={200: {"headers": PAGE_HEADERS}, **responses(404, 422)},
)  # fmt: skip
def workloads(
    request: Request,
    store: Storage,
    op: Text = None,
    shape: Annotated[str | None, Query(max_length=200, description="An argument shape, e.g. 1,64,56,56.")] = None,
    dtype: Text = None,
    device: Text = None,
    model: Text = None,
    workload: Text = None,
    top_k: Annotated[int, Query(ge=1, le=100)] = 1,
    limit: Annotated[int, Query(ge=1, le=MAX_ROWS, description="(workload, device) pairs in the answer.")] = 100,
    trust: Annotated[str, Query(pattern="^(imported|verified)$")] = "imported",
    offset: Annotated[int, Query(ge=0, le=2**31, description="(workload, device) pairs skipped.")] = 0,
):
    """The best records of each (workload, device) matching every filter, as `registry lookup --json`: the pairs
    ``offset`` to ``offset + limit`` of them, in a fixed order; ``X-Total-Count`` says how many pairs match in all,
    and ``Link`` (``rel="next"``) where the next page is, while there is one."""
    f = LookupFilter(
        op=op, shape=parse_shape(shape), dtype=dtype, model=model, workload=parse_workload(workload),
        top_k=top_k, limit=limit, trust=trust, offset=offset,
    )  # fmt: skip
    f.device_ids = [d.id for d in store.resolve_devices(device)] if device else None
    answer = _json({"schema_version": schemas.SCHEMA_VERSION, "rows": [r.as_dict() for r in store.lookup(f)]})
    total = _pairs(store, f)
    answer.headers["X-Total-Count"] = str(total)
    if offset + limit < total:
        after = str(request.url.include_query_params(offset=offset + limit))
        answer.headers["Link"] = f'<{after}>; rel="next"'
    return answer


def _pairs(store: RegistryStorage, f: LookupFilter) -> int:
    """How many (workload, device) pairs match ``f``'s filters, whatever its window."""
    if f.workload is None:  # the search's count: the same filters, over the same best records
        browse = BrowseFilter(
            op=f.op, shape=f.shape, dtype=f.dtype, device_ids=f.device_ids, model=f.model, trust=f.trust, limit=1
        )  # fmt: skip
        return store.browse(browse).total
    # one workload: a pair per device at most, which one lookup counts
    every = dataclasses.replace(f, top_k=1, limit=MAX_ROWS, offset=0)
    return len(store.lookup(every))


@router.get(
    "/workloads/{shash}", response_model=schemas.LookupOutput, tags=["records"], operation_id="getWorkload",
    responses=responses(404, 422),
)  # fmt: skip
def workload(store: Storage, shash: str, top_k: Annotated[int, Query(ge=1, le=100)] = 20):
    """A workload's records on every device, best first, with their provenance."""
    rows = store.lookup(LookupFilter(workload=parse_workload(shash), top_k=top_k, limit=1000))
    if not rows:
        raise HttpProblem(404, f"no stored record of workload {shash}")
    return schemas.LookupOutput(rows=[r.as_dict() for r in rows])


@router.get(
    "/records/{record_id}", response_model=schemas.RecordOutput, tags=["records"], operation_id="getRecord",
    responses=responses(404, 422),
)  # fmt: skip
def record(store: Storage, record_id: Annotated[int, PathPart(ge=1, le=2**62)]):
    prov = store.record_provenance(record_id)
    r = prov.record
    return schemas.RecordOutput(
        record_id=r.id, workload=prov.workload, device_id=prov.device_id, latency_us=(r.mean_s or 0) * 1e6,
        run_secs=r.run_secs, source=prov.source, donor_record_id=prov.donor_record_id, donor=prov.donor,
        team=prov.team, model=prov.model, host=prov.host, tvm_version=prov.tvm_version, created_at=prov.created_at,
        trace=json.loads(r.trace_json),
    )  # fmt: skip


@router.get(
    "/models", response_model=schemas.ModelsOutput, tags=["models"], operation_id="listModels",
    responses=responses(422),
)  # fmt: skip
def models(store: Storage, limit: Annotated[int, Query(ge=1, le=1000)] = 100):
    return schemas.ModelsOutput(rows=model_entries(store, limit))


@router.get(
    "/models/{name:path}", response_model=schemas.ModelReportData, tags=["models"], operation_id="getModelReport",
    responses=responses(404, 422),
)  # fmt: skip
def model_report(reports: Reports, name: str, device: Text = None):
    """What `registry report` draws for the model: its task table and curves, as data."""
    return report_output(reports.get(name, device))


@router.get(
    "/exchange", response_model=schemas.ExchangeOutput, tags=["sharing"], operation_id="describeExchange",
    responses=responses(404, 422),
)  # fmt: skip
def exchange(
    store: Storage, device: Text = None, team: Text = None, model: Text = None, since: dt.datetime | None = None
):
    """The id and filter key a pull of these filters keeps its progress under (`registry pull URL`). 404, naming
    what exists, when a device, team or model filter matches no record (whatever ``since`` says)."""
    filters = _filters(store, device, team, model, since)
    if device or team or model:
        _refuse_unmatched(store, dataclasses.replace(filters, since=None), device, team, model)
    return schemas.ExchangeOutput(origin=store.registry_id(), filters_key=filters.key())


@router.get(
    "/exchange/bundle", response_class=FileResponse, tags=["sharing"], operation_id="getExchangePage",
    responses={200: {"content": {"application/zip": {"schema": BINARY}}, "description": "One page, a bundle."},
               **responses(404, 422)},
)  # fmt: skip
async def exchange_bundle(
    store: Storage,
    limits: RequestLimits,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = PAGE,
    device: Text = None,
    team: Text = None,
    model: Text = None,
    since: dt.datetime | None = None,
):
    """One page of the records matching the filters, after record id ``after``, as a bundle: its manifest's
    ``last_record_id`` is where the next page starts; a page of 0 records is the end."""
    import tempfile

    from registry.share.bundle import write_bundle

    def write(path: Path):
        filters = _filters(store, device, team, model, since)
        with store.read_exchange(filters, after, limit) as found:
            return write_bundle(path, found, filters.described())

    with tempfile.NamedTemporaryFile(prefix="registry-pull-", suffix=".bundle", delete=False) as f:
        path = Path(f.name)
    try:
        async with limits.paging:
            info = await run_in_threadpool(write, path)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return FileResponse(
        path, media_type="application/zip", filename="page.bundle",
        headers={"X-Registry-Records": str(info.records)}, background=BackgroundTask(path.unlink, missing_ok=True),
    )  # fmt: skip


@router.get(
    "/sync-state", response_model=schemas.SyncStateOutput, dependencies=[Depends(writer)], tags=["sharing"],
    operation_id="getSyncState", responses=responses(422),
)  # fmt: skip
def sync_state(
    store: Storage,
    token: Writer,
    origin: Annotated[str, Query(max_length=64)],
    key: Annotated[str, Query(pattern="^[0-9a-f]{64}$")],
):
    """How far pushes from registry ``origin`` with filter set ``key`` *and this token* have come (`registry
    push URL`): a writer sees and moves only its own marks."""
    return schemas.SyncStateOutput(last_record_id=store.last_synced(origin, push_key(token, key)))


@router.post(
    "/bundles", response_model=schemas.ImportOutput, dependencies=[Depends(writer)], tags=["sharing"],
    operation_id="pushBundle", responses=responses(413, 422),
    openapi_extra={"requestBody": {"required": True, "description": "A bundle (`registry export --bundle`).",
                                   "content": {"application/zip": {"schema": BINARY}}}},
)  # fmt: skip
async def push(
    request: Request,
    store: Storage,
    limits: RequestLimits,
    token: Writer,
    sync_key: Annotated[str | None, Query(pattern="^[0-9a-f]{64}$")] = None,
    skip_invalid: bool = False,
):
    """Import a bundle, checked as `registry import` checks one: every trace replayed on its workload, one bad
    record refuses the whole bundle (``skip_invalid``: it is left out, counted, and the first one named). Its
    records arrive "imported", never trusted as measured here. ``sync_key``: the pusher's filter key, under which
    (with the token's name) the bundle's origin and last record id are kept, so that its next push sends only what
    came after."""
    mark_key = None if sync_key is None else push_key(token, sync_key)
    path = await receive_upload(request, limits.max_upload)
    try:
        async with limits.pushing:
            result = await run_in_threadpool(_import, store, path, mark_key, skip_invalid)
    finally:
        path.unlink(missing_ok=True)
    return schemas.ImportOutput(**dataclasses.asdict(result))


@router.get(
    "/tokens", response_model=schemas.TokenListOutput, dependencies=[Depends(admin)], tags=["tokens"],
    operation_id="listTokens", responses=responses(),
)  # fmt: skip
def tokens(store: Storage):
    return token_list(store)


@router.delete(
    "/tokens/{name}", response_model=schemas.TokenListOutput, dependencies=[Depends(admin)], tags=["tokens"],
    operation_id="revokeToken", responses=responses(404, 422),
)  # fmt: skip
def revoke(store: Storage, name: str):
    if not store.revoke_token(name):
        raise HttpProblem(404, f"no token named {name!r} that is not revoked already")
    return token_list(store)


# -- what the API and the web view both use ---------------------------------------------------------------------------


def _json(value: Any) -> Response:
    """``value`` as JSON, as the route's response model documents it, written by orjson without the model's
    validation: the rows come from the store in that shape, and validating a lookup's rows took as long as finding
    them."""
    return Response(orjson.dumps(value), media_type="application/json")


def model_entries(store: Catalogue, limit: int) -> list[schemas.ModelEntry]:
    rows = []
    for name in store.model_names(limit):
        for m in store.find_models(name)[:1]:
            rows.append(
                schemas.ModelEntry(
                    id=m.id,
                    name=m.name,
                    sha256=m.sha256,
                    input_shapes=_input_shapes(m.input_shapes_json),
                    created_at=utc_text(m.created_at),
                )  # fmt: skip
            )
    return rows


def _input_shapes(text: str | None) -> dict[str, list[int]] | None:
    """A model's stored input shapes, ``{"x": [8, 64]}``; None (shown as unknown) for a row written around the
    registry with anything else there: a list, a string, null, text that is no JSON."""
    try:
        shapes = json.loads(text)
    except (TypeError, ValueError):
        return None
    if isinstance(shapes, dict) and all(
        isinstance(v, list) and all(type(d) is int for d in v) for v in shapes.values()
    ):
        return shapes
    return None


def report_output(data) -> schemas.ModelReportData:
    fields = dataclasses.asdict(data)
    fields.pop("untuned_ms"), fields.pop("final_ms"), fields.pop("history")  # a run's, never a stored model's
    fields["generated_at"] = utc_text(data.generated_at)
    fields["start"] = utc_text(data.start)
    return schemas.ModelReportData(**fields)


def token_list(store: Tokens) -> schemas.TokenListOutput:
    return schemas.TokenListOutput(
        rows=[schemas.TokenEntry(name=t.name, role=t.role, created_at=utc_text(t.created_at),
                                 revoked_at=utc_text(t.revoked_at), expires_at=utc_text(t.expires_at))
              for t in store.tokens()]
    )  # fmt: skip


def _filters(store: Catalogue, device, team, model, since) -> ExchangeFilters:
    return exchange_filters(store, device, team, model, since)


def _refuse_unmatched(store: RegistryStorage, filters: ExchangeFilters, device, team, model) -> None:
    """404 when no record matches ``filters``: a misspelt team or model would otherwise pull nothing, as if the
    server had nothing new. The detail names the filter that matches nothing alone (or all of them, together) and
    what exists (``registry.share.export.held``)."""
    blamed = unmatched(store, filters)
    values = {"team": team, "model": model, "device_keys": device}
    named = {field: f"{field.removesuffix('_keys')} {values[field][:60]!r}" for field in blamed}
    if len(blamed) == 1:
        known = held(store, blamed[0], "/api/v1/devices lists the devices")
        raise HttpProblem(404, f"no record of {named[blamed[0]]} in this registry ({known})")
    if blamed:
        raise HttpProblem(404, f"no record matches {' and '.join(named.values())} together in this registry")


def push_key(token: TokenRow | None, sync_key: str) -> str:
    """The key a push's progress is kept under: the pusher's filter key and the token's name. A bundle's origin is
    the pusher's claim, so a mark kept under the origin alone would let any writer stop another registry's pushes
    (a forged last record id of 2^62 withheld all its records until `--full`)."""
    name = "" if token is None else token.name
    return hashlib.sha256(f"push\0{name}\0{sync_key}".encode()).hexdigest()


def _import(store: RecordStorage, path: Path, sync_key: str | None, skip_invalid: bool = False):
    """A pushed bundle into the store, as ``registry import`` takes one; messages name "the bundle", not the
    server's temporary file."""
    from registry.share.bundle import read_bundle
    from registry.share.exchange_import import import_exchange

    exchange, manifest = read_bundle(path, where="the bundle")
    mark = None
    if sync_key is not None and "last_record_id" in manifest:  # read_bundle checked it is a record id
        mark = (exchange.origin, sync_key, manifest["last_record_id"])
    return import_exchange(store, exchange, where="the bundle", sync_mark=mark, skip_invalid=skip_invalid)
