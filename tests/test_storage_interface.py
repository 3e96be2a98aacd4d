"""The storage interface: nothing outside ``registry/store/sql`` reaches it but the storage factory, ``Store``
implements all of the interface, the factory picks it by URL, and the modules it moved out of the SQL implementation
need neither SQLAlchemy nor TVM."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from registry import testing
from registry.errors import BadInputError, DatabaseError, UnknownDeviceError
from registry.store.factory import open_lookup, open_storage
from registry.store.interface import RegistryStorage
from registry.store.sql.store import Store
from registry.store.traces import record_trace_hash
from registry.store.urls import redact
from registry.store.values import LookupFilter
from tests.imports import ROOT, imported, module_name, source_files

SQL = "registry.store.sql"  # the SQL implementation
FACTORY = "registry.store.factory"  # the one module outside it that may import it
# Inside the implementation: its own modules, and the Alembic revisions of its schema (migrations/, which
# registry.store.sql.migrate runs).
INSIDE = (SQL, "registry.store.migrations")


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _sql_imports(source: str, module: str, is_package: bool = False) -> set[str]:
    """The names of the SQL implementation that ``source`` imports, in any spelling, at any depth (a function's
    imports included); docstrings and comments that name it are no imports."""
    names = imported(source, module, is_package)
    return {n for n in names if _within(n, (SQL,))}


def _outside_modules() -> dict[str, set[str]]:
    """Every module of registry/ and cli/ outside the SQL implementation, with what of the implementation it imports."""
    found = {}
    for path in source_files():
        name = module_name(path)
        if not _within(name, INSIDE):
            found[name] = _sql_imports(path.read_text(), name, path.name == "__init__.py")
    return found


def test_only_the_factory_imports_the_sql_implementation():
    found = _outside_modules().items()
    offenders = [f"{name}: {', '.join(sorted(sql))}" for name, sql in found if sql and name != FACTORY]
    assert not offenders, f"reach the SQL implementation through {FACTORY} instead:\n" + "\n".join(offenders)


def test_the_guard_walks_every_module_outside_the_implementation():
    walked = _outside_modules()
    assert {"registry", "registry.cli.lookup", "registry.server.api", "registry.store.own_files"} <= set(walked)
    assert walked[FACTORY], "the factory is the way in: it imports the implementation"
    every = {module_name(p) for p in source_files()}
    assert set(walked) == {m for m in every if not _within(m, INSIDE)}


@pytest.mark.parametrize(
    "source",
    [
        "from registry.store.sql import queries",
        "from registry.store.sql.models import Workload",
        "import registry.store.sql.ingest",
        "import registry.store.sql",
        "from registry.store import sql",
        "from registry.store.sql import lookup, ingest as i",
        "from ..store.sql import models",
        "from .sql import lookup",
        "def f():\n    from registry.store.sql.queries import top_k",
        "class C:\n    def m(self):\n        import registry.store.sql.engine as e",
    ],
)
def test_the_check_sees_every_spelling(source):
    module = "registry.store.own_files" if source.startswith("from .sql") else "registry.similarity.donors"
    assert _sql_imports(source, module)


def test_the_check_lets_the_interface_and_neutral_modules_through():
    source = (
        '"""Reads through registry.store.sql.lookup (a mention, not an import)."""\n'
        "from registry.store.interface import RegistryStorage  # not registry.store.sql\n"
        "from registry.store.factory import open_storage\n"
        "from registry.store import rows, sqlite_helpers\n"
        "from registry.store.urls import redact\n"
        "import registry.store.sqlx\n"
    )
    assert not _sql_imports(source, "registry.share.export")


NEUTRAL = ["registry.store.factory", "registry.store.urls", "registry.store.query", "registry.store.trust",
           "registry.store.traces", "registry.store.own_files"]  # fmt: skip


def test_the_neutral_modules_import_neither_sqlalchemy_nor_tvm():
    code = (
        "import sys\n"
        f"for name in {NEUTRAL!r}:\n"
        "    __import__(name)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'tvm'))\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def _protocols() -> list[type]:
    """RegistryStorage and the protocols, one per concern, it is made of."""
    return [p for p in RegistryStorage.__mro__ if p.__module__ == RegistryStorage.__module__]


def _members() -> list[str]:
    """The protocol's methods, those it takes from each concern's protocol included."""
    return [
        name
        for protocol in _protocols()
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    ]


def test_the_protocol_documents_every_method():
    assert len(_members()) > 20
    for name in _members():
        assert inspect.getdoc(getattr(RegistryStorage, name)), f"RegistryStorage.{name} has no docstring"


@pytest.mark.parametrize("name", _members())
def test_store_implements_each_method(name):
    """Same parameters (names, kinds, defaults) as the protocol declares, after ``self`` (a module function serving
    as a method names it otherwise); annotations are left to type checkers."""
    assert callable(getattr(Store, name, None)), f"Store has no {name}"

    def params(fn) -> list[tuple]:
        return [(p.name, p.kind, p.default) for p in list(inspect.signature(fn).parameters.values())[1:]]

    assert params(getattr(Store, name)) == params(getattr(RegistryStorage, name))


def test_open_storage_picks_the_sql_store_by_url(tmp_path):
    store = open_storage(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        assert isinstance(store, Store)
        attributes = {name for protocol in _protocols() for name in vars(protocol).get("__annotations__", {})}
        assert "url" in attributes and attributes <= set(vars(store))
        assert store.schema_revision() is not None
    finally:
        store.close()
    with pytest.raises(DatabaseError, match="no registry"):
        open_storage(str(tmp_path / "missing.db"), create_new=False)  # a plain path is an SQLite file
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("url", ["mysql://u:secret@127.0.0.1/x", "mongodb://h/db", "redis+tls://h:1/0"])
def test_open_storage_refuses_other_schemes(url, tmp_path):
    with pytest.raises(DatabaseError) as e:
        open_storage(url)
    message = str(e.value)
    assert "\n" not in message and "cannot use database" in message and "SQLite" in message and "PostgreSQL" in message
    assert "secret" not in message


def test_open_storage_leaves_a_malformed_url_to_the_engine():
    with pytest.raises(DatabaseError, match="not a database URL"):
        open_storage("not a url")


# URLs as typed, and as SQLAlchemy would misread them: a password with @ or :, IPv6, a port, a query, no URL at all.
URLS = [
    "postgresql://u:secret@db.example:5432/reg",
    "postgresql+psycopg://u:p%40ss:w@[::1]:5432/reg?sslmode=require&application_name=a b&x=",
    "postgresql://u@h/reg?b=2&a=1&a=0",
    "postgresql://:pw@h",
    "postgresql://h:/reg",
    "sqlite:///relative.db",
    "sqlite:////abs/path with space/r.db?mode=ro",
    "sqlite://",
    "not a url",
    "/home/u/registry.db",
    "mysql://u:secret@127.0.0.1/x",
    "postgresql://us%2Fer:pw@h/d%2Fb#frag",
]


@pytest.mark.parametrize("url", URLS)
def test_redact_shows_a_url_as_the_engine_does(url):
    """The same text SQLAlchemy renders (the index of a server registry is named after its digest), or the same
    error; never the password."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        expected = make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        expected = url
    except ValueError:
        with pytest.raises(ValueError):
            redact(url)
        return
    assert redact(url) == expected
    assert "secret" not in redact(url)


@pytest.mark.parametrize("selector", [None, "name", "id"])
def test_open_lookup_reads_what_the_storage_reads(filled, db_url, selector):
    store, device_id = filled
    with open_lookup(db_url) as direct:
        [device] = direct.all_devices()
        assert device.id == device_id
        chosen = {None: None, "name": device.name, "id": str(device.id)}[selector]
        devices = direct.resolve_devices(chosen) if chosen else None
        assert devices == (store.resolve_devices(chosen) if chosen else None)
        f = LookupFilter(top_k=2, limit=10, device_ids=[d.id for d in devices] if devices else None)
        assert direct.lookup(f) == store.lookup(f) and len(store.lookup(f)) == 2
        with pytest.raises(UnknownDeviceError, match="no device 'nope'"):
            direct.resolve_devices("nope")


def test_open_lookup_leaves_a_missing_registry_to_the_storage(tmp_path):
    assert open_lookup(f"sqlite:///{tmp_path / 'missing.db'}") is None
    assert not (tmp_path / "missing.db").exists()


# -- the reads the TVM side makes, on each backend ---------------------------------------------------------------


@pytest.fixture
def filled(db_url):
    """Three workloads on one device: 0 with three ok records and a failed one, 1 with a failed one only, 2 none."""
    store = open_storage(db_url)
    dev = testing.device()
    store.ingest(
        [testing.workload(i) for i in range(3)],
        [testing.record(0, j, dev) for j in range(3)]
        + [testing.record(0, 9, dev, failed=True), testing.record(1, 0, dev, failed=True)],
    )
    yield store, store.add_device(dev)
    store.close()


def test_workloads_and_records(filled):
    store, device = filled
    idents = [(testing.shash(i), "structural") for i in range(3)]
    ids = store.workload_ids([*idents, ("404", "structural")])
    assert set(ids) == set(idents)
    w0 = ids[idents[0]]
    assert store.workloads_by_id([w0])[w0].shash == testing.shash(0)
    assert store.workloads_by_id([]) == {}

    top = store.top_k(w0, device, 2)
    assert len(top) == 2 and top[0].mean_s <= top[1].mean_s
    assert store.count_records(device) == 5
    state = store.tuning_state(w0, device)
    assert state.tuned == 4 and record_trace_hash(testing.trace(0, 9)) in state.traces
    assert store.ok_record_counts(device) == {w0: (testing.workload(0).signature.task_name, 3)}


@pytest.mark.parametrize("best_only", [False, True])
def test_device_records_come_with_their_workloads(filled, best_only):
    store, device = filled
    with store.device_records(device, best_only=best_only) as found:
        records = list(found.records)
        assert list(found.workloads) == sorted(found.workloads)
        assert {r.workload_id for r in records} == set(found.workloads)
    assert len(records) == (1 if best_only else 5)


def test_the_similarity_index_reads(filled):
    store, _ = filled
    w0 = store.workload_ids([(testing.shash(0), "structural")])[(testing.shash(0), "structural")]
    summary = store.indexed_set()
    assert (summary.count, summary.id_sum, summary.max_id) == (1, w0, w0)  # workload 1 has no ok record
    [(wid, embedding)] = store.indexed_embeddings()
    assert wid == w0 and isinstance(embedding, bytes) and embedding


def test_ingest_batches_is_one_transaction(filled):
    store, device = filled
    dev = testing.device()

    def batches():
        yield [testing.record(2, 0, dev)]
        raise BadInputError("found late")

    with pytest.raises(BadInputError, match="found late"):
        store.ingest_batches([], batches)
    assert store.count_records(device) == 5  # the first batch was rolled back with the rest

    calls = []

    def twice():
        calls.append(1)
        yield [testing.record(2, 0, dev)]
        yield [testing.record(2, 1, dev), testing.record(2, 0, dev)]

    result = store.ingest_batches([], twice)
    assert (result.records_new, result.records_present, len(calls)) == (2, 1, 1)
