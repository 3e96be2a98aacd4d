"""The storage interface: nothing outside ``registry/store/`` reaches past it, ``Store`` implements all of it, and the
SQL implementation is picked by URL. No TVM here."""

from __future__ import annotations

import inspect

import pytest

from registry import testing
from registry.errors import BadInputError, DatabaseError
from registry.store.interface import RegistryStorage, open_storage, record_trace_hash
from registry.store.sql.store import Store
from tests.imports import ROOT, imported, module_name, source_files

# The store's internals: its tables, its SQL, and the code that writes.
PRIVATE = {"registry.store.sql.models", "registry.store.sql.queries", "registry.store.sql.ingest"}


def _private(names: set[str]) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in PRIVATE)}


def test_nothing_outside_the_store_imports_its_internals():
    offenders = []
    for path in source_files():
        if module_name(path).startswith("registry.store."):
            continue
        found = _private(imported(path.read_text(), module_name(path), path.name == "__init__.py"))
        offenders += [f"{path.relative_to(ROOT)}: {name}" for name in sorted(found)]
    assert not offenders, "use registry.store.interface.RegistryStorage instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "source",
    [
        "from registry.store.sql import queries",
        "from registry.store.sql.models import Workload",
        "import registry.store.sql.ingest",
        "from registry.store.sql import lookup, ingest as i",
        "from ..store.sql import models",
        "def f():\n    from registry.store.sql.queries import top_k",
    ],
)
def test_the_check_sees_every_spelling(source):
    assert _private(imported(source, "registry.similarity.donors"))


def test_the_check_lets_the_interface_through():
    source = (
        "from registry.store.interface import RegistryStorage\n"
        "from registry.store.sql import lookup\n"
        "from registry.store import rows"
    )
    assert not _private(imported(source, "registry.share.export"))


def _members() -> list[str]:
    """The protocol's methods, those it takes from RecordReads included."""
    return [
        name
        for protocol in RegistryStorage.__mro__
        if protocol.__name__ in ("RegistryStorage", "RecordReads")
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
        assert hasattr(store, "url") and set(RegistryStorage.__annotations__) <= set(vars(store))
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
    yield store, store.device_id(dev)
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
