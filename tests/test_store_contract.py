"""The store's contract, on SQLite and (with REGISTRY_TEST_DATABASE_URL) PostgreSQL. No TVM here."""

from __future__ import annotations

import pytest
from sqlalchemy import event, func, inspect, select
from sqlalchemy.orm import Session

from registry import hostinfo, testing
from registry.errors import BadInputError, UnknownDeviceError
from registry.store.rows import ModelIn
from registry.store.sql import schema
from registry.store.sql.models import BestRecord, TuningRecord
from registry.store.sql.store import Store
from registry.store.values import LookupFilter


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    yield s
    s.close()


def fill(store: Store, n_workloads: int = 5, per: int = 4, dev=None):
    dev = dev or testing.device()
    wls = [testing.workload(i) for i in range(n_workloads)]
    recs = [testing.record(i, j, dev) for i in range(n_workloads) for j in range(per)]
    return store.ingest(wls, recs), wls, recs


def test_fresh_database_is_migrated_with_a_private_version_table(store):
    with store.engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
        assert schema.current_revision(conn) == schema.HEAD
    assert {"device", "workload", "tuning_record", "best_record", "model", "model_task"} <= tables
    assert schema.VERSION_TABLE in tables and "alembic_version" not in tables


def test_ingest_counts_new_and_present_and_is_idempotent(store):
    first, wls, recs = fill(store)
    assert (first.workloads_new, first.records_new) == (5, 20)
    again = store.ingest(wls, recs)
    assert (again.workloads_new, again.workloads_present, again.records_new, again.records_present) == (0, 5, 0, 20)
    assert store.stats().records == 20


def test_best_record_tracks_the_fastest_ok_record(store):
    dev = testing.device()
    store.ingest([testing.workload(0)], [testing.record(0, j, dev) for j in range(6)])
    store.ingest([], [testing.record(0, 99, dev, failed=True)])
    with Session(store.engine) as s:
        fastest = s.execute(select(func.min(TuningRecord.mean_s))).scalar()
        best = s.execute(select(BestRecord)).scalar_one()
        assert best.mean_s == pytest.approx(fastest)
        assert best.n_records == 6  # the failed record is kept but never counts as usable
        assert s.execute(select(func.count()).select_from(TuningRecord)).scalar() == 7


def test_lookup_filters(store):
    fill(store, n_workloads=14, per=3)
    other = testing.device(num_threads=2)
    store.ingest([], [testing.record(1, j, other) for j in range(2)])

    def wl_ids(**kw):
        return {r.workload for r in store.lookup(LookupFilter(**kw))}

    assert wl_ids(op="conv2d") == {testing.workload(0).shash, testing.workload(7).shash}
    shape = testing.workload(3).signature.args[0][0]
    assert testing.workload(3).shash in wl_ids(shape=shape)
    assert wl_ids(shape=(9, 9, 9)) == set()
    assert wl_ids(dtype="float16") == set()
    assert wl_ids(workload=testing.workload(2).shash) == {testing.workload(2).shash}
    assert wl_ids(model="no-such-model") == set()
    devs = {d.name: d.id for d in store.resolve_devices(other.name)}
    rows = store.lookup(LookupFilter(device_ids=list(devs.values())))
    assert [r.workload for r in rows] == [testing.workload(1).shash]
    top = store.lookup(LookupFilter(workload=testing.workload(5).shash, top_k=3))
    assert [r.rank for r in top] == [1, 2, 3]
    assert [r.latency_us for r in top] == sorted(r.latency_us for r in top)
    assert len(store.lookup(LookupFilter(limit=4))) == 4


def test_model_tasks_make_lookup_by_model_work(store):
    fill(store, n_workloads=4)
    wls = [testing.workload(i) for i in (1, 2)]
    store.save_model(
        ModelIn("resnet-ish", "ab" * 32, {"x": [1, 3, 32, 32]}, [(w, w.signature.task_name, 2) for w in wls])
    )
    assert {r.workload for r in store.lookup(LookupFilter(model="resnet-ish"))} == {w.shash for w in wls}
    assert store.stats().models == 1


def test_devices_are_one_row_per_identity(store):
    a, b = testing.device(1), testing.device(2)
    assert store.add_device(a) == store.add_device(a)
    assert store.add_device(a) != store.add_device(b)
    assert len(store.devices()) == 2


def test_unknown_device_and_ambiguous_device(store):
    fill(store)
    with pytest.raises(UnknownDeviceError, match="registry devices"):
        store.resolve_devices("no-such-device")
    store.add_device(testing.device(num_threads=1, mcpu="other"))
    store.add_device(
        testing.device(num_threads=1, mcpu="synthetic").__class__(
            target=testing.device().target, num_threads=1, host_model="Another CPU", tvm_version="0.27.0"
        )
    )
    name = testing.device().name
    assert len(store.resolve_devices(name)) == 2
    with pytest.raises(UnknownDeviceError, match="ambiguous"):
        store.resolve_one_device(name)


def test_host_is_the_device_this_registry_measured_on_when_a_pulled_one_has_the_same_cpu_name(store):
    """A VM's CPU model names no generation: a bundle tuned on an emeraldrapids Xeon brings a device of this
    rocketlake Xeon's name. `--device host` is the one this registry measured on, not an ambiguity (it was, in the
    README's tour after `registry pull`)."""
    from dataclasses import replace

    here = replace(testing.device(mcpu="rocketlake"), host_model=hostinfo.cpu_model())
    pulled = replace(here, target={**here.target, "mcpu": "emeraldrapids"})
    store.ingest([testing.workload(i) for i in range(2)],
                 [testing.record(0, 0, pulled, source="imported"), testing.record(1, 0, here)])  # fmt: skip
    assert {d.id for d in store.resolve_devices("host")} == {store.add_device(here), store.add_device(pulled)}
    assert store.resolve_one_device("host").id == store.add_device(here)
    store.ingest([], [testing.record(0, 1, pulled)])  # measured on both now: ambiguous again, and said so
    with pytest.raises(UnknownDeviceError, match="ambiguous"):
        store.resolve_one_device("host")


def test_a_record_of_a_missing_workload_writes_nothing(store):
    dev = testing.device()
    before = store.stats()
    with pytest.raises(BadInputError, match="not in the registry"):
        store.ingest([testing.workload(0)], [testing.record(0, 0, dev), testing.record(42, 0, dev)])
    assert store.stats() == before  # the workload of the good half was rolled back too


def test_a_bulk_write_refreshes_planner_statistics(sqlite_url):
    """Without statistics SQLite picks a scan of the device's workloads for a lookup by hash (30x slower at 10^6)."""
    store = Store(sqlite_url)
    fill(store, n_workloads=10, per=100)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM sqlite_stat1").scalar() > 0


def test_a_bulk_write_is_the_same_whichever_way_it_goes_in(store):
    """Past ingest.COPY_ROWS records PostgreSQL takes COPY instead of INSERTs: same rows, same best, idempotent."""
    from registry.store.sql import ingest

    n_workloads, per = 5, ingest.COPY_ROWS // 5 + 10
    first, _, _ = fill(store, n_workloads, per)
    assert first.records_new == n_workloads * per
    again, _, _ = fill(store, n_workloads, per)
    assert (again.records_new, again.records_present) == (0, n_workloads * per)
    with store.read() as conn:
        best = dict(conn.execute(select(BestRecord.workload_id, BestRecord.mean_s)).all())
        fastest = dict(
            conn.execute(
                select(TuningRecord.workload_id, func.min(TuningRecord.mean_s)).group_by(TuningRecord.workload_id)
            ).all()
        )
        trust = set(conn.execute(select(TuningRecord.trust).distinct()).scalars())
    assert best == fastest and len(best) == n_workloads and trust == {"measured"}


@pytest.mark.parametrize("bulk", [False, True], ids=["insert", "copy"])
def test_a_measurement_time_is_kept_and_one_without_a_zone_is_utc(store, bulk):
    """Records that travelled keep their time, whichever way they go in (PostgreSQL takes COPY past COPY_ROWS). A
    time without a zone is UTC, as SQLite writes it, whatever zone the server's session is set to."""
    import dataclasses
    import datetime as dt

    from registry.store.sql import ingest

    dev, per = testing.device(), ingest.COPY_ROWS if bulk else 3
    naive = dt.datetime(2026, 1, 2, 3, 4, 5, 678000)
    in_utc = naive.replace(tzinfo=dt.timezone.utc)
    with_zone = dt.datetime(2026, 1, 2, 6, 4, 5, 678000, tzinfo=dt.timezone(dt.timedelta(hours=3)))  # 03:04 UTC
    records = [
        dataclasses.replace(testing.record(0, j, dev), created_at=naive if j % 2 else with_zone) for j in range(per)
    ]
    if store.engine.dialect.name == "postgresql":  # sessions in another zone: a naive time must not be read in it

        @event.listens_for(store.engine, "connect")
        def tokyo(dbapi_connection, _record):
            with dbapi_connection.cursor() as cur:
                cur.execute("SET TIME ZONE 'Asia/Tokyo'")
            dbapi_connection.commit()

        store.engine.dispose()
    store.ingest([testing.workload(0)], records)
    with store.read() as s:
        times = set(s.execute(select(TuningRecord.created_at)).scalars())
    # SQLite gives its times back without a zone (UTC); PostgreSQL with one
    assert {t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc) for t in times} == {in_utc}
