"""The server's routes are module-level functions, and the HTTP status of a refusal comes from the error's type.

A route defined inside a function is rebuilt, with its own closure, for every app; a module-level one is written once
and reaches the app's storage, gate and limits only through ``Depends`` (``registry.server.state``). A status chosen
from an error's text turns a 404 into a 400 when a message is reworded; each error class states its own status
(``http_status``), and a command-line hint (``cli_hint``) stays out of what the server answers.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import pickle
from types import SimpleNamespace

import pytest

from registry.errors import (
    BadInputError,
    DatabaseError,
    DeviceNotFoundError,
    NotFoundError,
    RegistryError,
    UnknownDeviceError,
)
from registry.server.app import ServeConfig, create_app

API_ROUTES = {
    ("GET", "/api/v1/registry"), ("GET", "/api/v1/stats"), ("GET", "/api/v1/devices"), ("GET", "/api/v1/workloads"),
    ("GET", "/api/v1/workloads/{shash}"), ("GET", "/api/v1/records/{record_id}"), ("GET", "/api/v1/models"),
    ("GET", "/api/v1/models/{name:path}"), ("GET", "/api/v1/exchange"), ("GET", "/api/v1/exchange/bundle"),
    ("GET", "/api/v1/sync-state"), ("POST", "/api/v1/bundles"), ("GET", "/api/v1/tokens"),
    ("DELETE", "/api/v1/tokens/{name}"), ("GET", "/api/v1/storage/{read}"), ("POST", "/api/v1/tasks"),
    ("POST", "/api/v1/leases/take"), ("POST", "/api/v1/leases/renew"), ("POST", "/api/v1/leases/release"),
    ("POST", "/api/v1/leases/effort"),
}  # fmt: skip
PAGE_ROUTES = {
    ("GET", "/"), ("GET", "/models"), ("GET", "/models/{name:path}"), ("GET", "/search"), ("GET", "/workloads/{shash}"),
    ("GET", "/login"), ("POST", "/login"), ("POST", "/logout"), ("GET", "/records/{record_id}"), ("GET", "/compare"),
}  # fmt: skip


class _Storage(SimpleNamespace):
    """Enough of a storage for an app whose requests reach no registry."""

    def close(self) -> None:
        pass


def _app():
    return create_app(ServeConfig(rate=0), store=_Storage())


def _served_routes(routes):
    """Every route an app serves; an included router may be kept whole (``original_router``) or copied in."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _served_routes(included.routes)
        elif hasattr(route, "endpoint"):
            yield route


def _registry_routes() -> list:
    return [r for r in _served_routes(_app().routes) if r.endpoint.__module__.startswith("registry.server")]


def test_the_app_serves_every_route_of_the_api_and_the_web_view():
    served = {(method, r.path) for r in _registry_routes() for method in r.methods}
    assert served == API_ROUTES | PAGE_ROUTES


def test_every_route_is_a_module_level_function():
    routes = _registry_routes()
    assert routes
    for route in routes:
        endpoint = route.endpoint
        assert "<locals>" not in endpoint.__qualname__, (
            f"{route.path}: {endpoint.__qualname__} is defined in a function"
        )
        module = importlib.import_module(endpoint.__module__)
        assert getattr(module, endpoint.__qualname__) is endpoint, route.path


def test_two_apps_serve_the_same_route_functions():
    first, second = (
        {(r.path, tuple(sorted(r.methods))): r.endpoint for r in _served_routes(_app().routes)} for _ in range(2)
    )
    ours = {k: v for k, v in first.items() if v.__module__.startswith("registry.server")}
    assert ours and all(second[k] is v for k, v in ours.items())


# -- the status of a refusal -------------------------------------------------------------------------------------------

RAISED = {
    # the text says "no device", the type says the selector was ambiguous: a 400, as its type says
    "ambiguous": UnknownDeviceError("no device is chosen: device 'cpu' is ambiguous; give its id"),
    "bad input naming no device": BadInputError("no device key in the bundle"),
    "device not found": DeviceNotFoundError("device 'nowhere' is not in the registry"),
    "not found": NotFoundError("record 7 is not in the registry"),
    "database": DatabaseError("could not connect to postgresql://secret@db/registry"),
    "plain": RegistryError("refused"),
    "hinted": BadInputError("2 records do not apply; nothing was written", cli_hint="--skip-invalid writes the rest"),
}


def raising(case: str):
    raise RAISED[case]


async def _get(app, path: str) -> tuple[int, dict]:
    """One GET through the whole ASGI app (its middleware and error handlers), without a network."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"accept", b"application/json")], "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }  # fmt: skip
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))


@pytest.fixture(scope="module")
def refusals() -> dict[str, tuple[int, dict]]:
    app = _app()
    app.add_api_route("/api/test/raise/{case}", raising)
    return {case: asyncio.run(_get(app, f"/api/test/raise/{case}")) for case in RAISED}


@pytest.mark.parametrize(
    "case, status",
    [
        ("ambiguous", 400),
        ("bad input naming no device", 400),
        ("device not found", 404),
        ("not found", 404),
        ("database", 503),
        ("plain", 400),
        ("hinted", 400),
    ],
)
def test_the_status_comes_from_the_error_type(refusals, case, status):
    answered, document = refusals[case]
    assert (answered, document["status"]) == (status, status)


def test_the_server_answers_the_fact_without_the_command_lines_hint(refusals):
    assert refusals["hinted"][1]["detail"] == "2 records do not apply; nothing was written"
    assert refusals["ambiguous"][1]["detail"] == str(RAISED["ambiguous"])


def test_a_database_error_keeps_its_text_in_the_log(refusals):
    assert "secret" not in refusals["database"][1]["detail"]
    assert "not answering" in refusals["database"][1]["detail"]


def test_the_command_line_says_the_hint_after_the_fact():
    e = BadInputError("nothing was written", cli_hint="--skip-invalid writes the rest")
    assert str(e) == "nothing was written (--skip-invalid writes the rest)"
    assert e.fact == "nothing was written"
    plain = BadInputError("nothing was written")
    assert str(plain) == plain.fact == "nothing was written"
    copied = pickle.loads(pickle.dumps(e))  # a replay worker's error crosses a process boundary
    assert (str(copied), copied.fact) == (str(e), e.fact)


def test_an_unknown_device_selector_raises_the_not_found_type(tmp_path):
    from registry.store.sql.store import Store

    with Store(f"sqlite:///{tmp_path}/registry.db") as store:
        with pytest.raises(DeviceNotFoundError, match="no device 'nowhere'"):
            store.resolve_devices("nowhere")
