"""The API as others build on it (#55): its OpenAPI schema says what the server does (a bearer scheme, tags, readable
operation ids, every refusal a problem document, the pushed bundle's body), and a query parameter a route does not
take is refused, not ignored. A real server on a loopback port (tests/server.py), SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re

import pytest

from registry.store.sql.store import Store
from tests.server import make_token, problem, request, serving

TAGS = {"registry", "records", "models", "sharing", "tokens", "tuning"}
PROBLEM_REF = "#/components/schemas/Problem"


@pytest.fixture
def empty(db_url) -> str:
    Store(db_url).close()  # a registry with nothing in it: the schema and the refusals need no record
    return db_url


def _operations(spec: dict):
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            yield path, method, operation


def test_the_schema_documents_tokens_tags_ids_problems_and_the_pushed_body(empty):
    with serving(empty) as base:
        spec = request(base + "/openapi.json").json()
    assert "HTTPValidationError" not in json.dumps(spec)  # a shape the server never sends
    schemes = spec["components"]["securitySchemes"]
    [(scheme, said)] = schemes.items()
    assert (said["type"], said["scheme"]) == ("http", "bearer")
    problem_schema = spec["components"]["schemas"]["Problem"]
    assert set(problem_schema["required"]) == {"type", "title", "status", "detail"}
    assert {t["name"] for t in spec["tags"]} == TAGS
    ids = []
    for path, _, op in _operations(spec):
        assert path.startswith("/api/v1/"), path  # the web view's pages are no part of the API's schema
        ids.append(op["operationId"])
        assert re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)+", op["operationId"]), op["operationId"]
        assert len(op["tags"]) == 1 and op["tags"][0] in TAGS, (path, op["tags"])
        assert op["security"] == [{scheme: []}], (path, op["security"])  # no read without a token here
        for status in ("400", "401", "403", "429", "503"):
            content = op["responses"][status]["content"]
            assert content == {"application/problem+json": {"schema": {"$ref": PROBLEM_REF}}}, (path, status)
        for status, said in op["responses"].items():  # every error status is a problem document
            if int(status) >= 400:
                assert list(said["content"]) == ["application/problem+json"], (path, status)
    assert len(ids) == len(set(ids))
    operations = {(m, p): op for p, m, op in _operations(spec)}
    assert operations[("get", "/api/v1/workloads")]["operationId"] == "listWorkloads"
    for where in (("get", "/api/v1/workloads/{shash}"), ("get", "/api/v1/records/{record_id}"),
                  ("get", "/api/v1/models/{name}"), ("delete", "/api/v1/tokens/{name}")):  # fmt: skip
        assert "404" in operations[where]["responses"], where
    push = operations[("post", "/api/v1/bundles")]
    assert push["requestBody"]["required"] is True
    assert push["requestBody"]["content"]["application/zip"]["schema"] == {"type": "string", "format": "binary"}
    assert "413" in push["responses"] and "422" in push["responses"]
    for route in ("tasks", "leases/take", "leases/renew", "leases/release", "leases/effort"):  # a tuning run's
        body = operations[("post", f"/api/v1/{route}")]["requestBody"]
        assert body["required"] is True and "application/json" in body["content"], route
    page = operations[("get", "/api/v1/exchange/bundle")]["responses"]["200"]["content"]
    assert "application/zip" in page


def test_a_public_servers_schema_lets_reads_go_without_a_token(empty):
    with serving(empty, public=True) as base:
        spec = request(base + "/openapi.json").json()
    ops = {(m, p): op for p, m, op in _operations(spec)}
    [scheme] = spec["components"]["securitySchemes"]
    assert ops[("get", "/api/v1/workloads")]["security"] == [{scheme: []}, {}]
    for still in (("post", "/api/v1/bundles"), ("get", "/api/v1/tokens"), ("get", "/api/v1/sync-state")):
        assert ops[still]["security"] == [{scheme: []}], still


# Each route of the API, as a client reaches it: what it takes it is given, plus one thing it does not take.
ROUTES = [
    "/api/v1/registry",
    "/api/v1/stats",
    "/api/v1/devices",
    "/api/v1/workloads?op=matmul&limit=5",
    "/api/v1/workloads/0123?top_k=2",
    "/api/v1/records/1",
    "/api/v1/models?limit=3",
    "/api/v1/models/nothing",
    "/api/v1/exchange?since=2024-01-01T00:00:00",
    "/api/v1/exchange/bundle?after=0&limit=10",
    "/api/v1/sync-state?origin=x&key=" + "0" * 64,
    "/api/v1/tokens",
]


def test_an_unknown_query_parameter_is_refused_naming_those_the_route_takes(empty):
    admin = make_token(empty, "admin")
    with serving(empty) as base:
        for route in ROUTES:
            given = request(base + route, admin)
            assert given.status in (200, 404), (route, given.status, given.body[:300])  # its own parameters pass
            joined = "&" if "?" in route else "?"
            detail = problem(request(base + route + joined + "colour=blue", admin), 400)
            assert "'colour'" in detail and route.split("?")[0] in detail, detail
            for name in re.findall(r"[?&]([a-z_]+)=", route):  # the parameters it takes are named
                assert name in detail, (route, detail)
        detail = problem(request(base + "/api/v1/workloads?op=matmul&team=vision", admin), 400)
        assert "'team'" in detail and "takes device, dtype" in detail and "top_k" in detail
        assert "no query parameter" in problem(request(base + "/api/v1/stats?verbose=1", admin), 400)
        # bounded and printable: a hostile name is cut, and quoted
        long = "x" * 5000
        detail = problem(request(base + f"/api/v1/devices?{long}=1", admin), 400)
        assert long not in detail and "x" * 40 in detail
        assert request(base + "/api/v1/workloads?team=vision").status == 400  # before the token: it costs nothing


def test_a_filter_of_a_pull_that_names_nothing_is_a_404_naming_what_exists(empty):
    reader = make_token(empty, "reader")
    with serving(empty) as base:
        detail = problem(request(base + "/api/v1/exchange?team=nlpp", reader), 404)
        assert "team 'nlpp'" in detail and "none" in detail
        detail = problem(request(base + "/api/v1/exchange?model=bert", reader), 404)
        assert "model 'bert'" in detail
        assert "no device '7'" in problem(request(base + "/api/v1/exchange?device=7", reader), 404)
        assert request(base + "/api/v1/exchange", reader).status == 200  # no filter: an empty pull, not a refusal


# -- paging the lookup ------------------------------------------------------------------------------------------------


def _on_more_devices(url: str, logs, n: int) -> None:
    """The logs' records measured again on ``n`` more devices: 1 + n (workload, device) pairs in all."""
    from registry.share.log_import import checked_workload
    from registry.store.rows import RecordIn
    from registry.tvm_side import tvmlog
    from registry.tvm_side.target import device_spec

    pair = tvmlog.find_logs(logs)[0]
    workloads = [checked_workload(w.where, w.mod_json) for w in tvmlog.read_workloads(pair.workload_file)]
    logged = list(tvmlog.read_records(pair.record_file))
    with Store(url) as store:
        for i in range(n):
            spec = device_spec(logged[0].target, host_model=f"box-{i}")
            records = [
                RecordIn(workload=workloads[r.workload_index].ident, device=spec, trace=r.trace,
                         run_secs=tuple(r.run_secs), source="tuned", tool_version="test", team=f"team-{i}",
                         model="tiny", host=f"host-{i}")
                for r in logged
            ]  # fmt: skip
            assert store.ingest(workloads, records).records_new > 0


@pytest.mark.tvm
def test_the_lookup_pages_with_an_offset_a_total_and_a_next_link(db_url, tuned_logs):
    from tests.server import fill, ok

    assert fill(db_url, tuned_logs.work_dir) > 0
    _on_more_devices(db_url, tuned_logs.work_dir, 4)
    reader = make_token(db_url, "reader")
    with serving(db_url) as base:
        whole = request(base + "/api/v1/workloads?limit=100", reader)
        assert whole.headers["x-total-count"] == "5" and "link" not in whole.headers
        assert whole.json() == ok("--db", db_url, "lookup", "--limit", "100")  # the CLI's lookup is as it was
        pairs = [(r["workload"], r["device_id"]) for r in whole.json()["rows"]]
        assert len(set(pairs)) == 5
        seen, url = [], base + "/api/v1/workloads?limit=2&top_k=2"
        while url:
            page = request(url, reader)
            assert page.status == 200 and page.headers["x-total-count"] == "5"
            rows = page.json()["rows"]
            assert len({(r["workload"], r["device_id"]) for r in rows}) <= 2
            seen += [(r["workload"], r["device_id"]) for r in rows if r["rank"] == 1]
            link = page.headers.get("link")
            url = link[1 : link.index(">")] if link else None
        assert sorted(seen) == sorted(pairs) and len(seen) == 5  # every pair once, none twice
        last = request(base + "/api/v1/workloads?offset=4&limit=2", reader)
        assert len(last.json()["rows"]) == 1 and "link" not in last.headers
        assert request(base + "/api/v1/workloads?offset=50", reader).json()["rows"] == []
        shash, device = pairs[0]
        one = request(base + f"/api/v1/workloads?workload={shash}&limit=1", reader)
        assert one.headers["x-total-count"] == str(sum(w == shash for w, _ in pairs)) and len(one.json()["rows"]) == 1
        on = request(base + f"/api/v1/workloads?device={device}", reader)
        assert on.headers["x-total-count"] == str(sum(d == device for _, d in pairs))
        assert "offset" in problem(request(base + "/api/v1/workloads?offset=-1", reader), 422)
