"""``--overlay`` (issue 12): transfer and tune read a shared registry without writing to it, and write to a local
SQLite overlay, which `registry sync` pushes later. Real TVM on the session's tiny tuned model and a sibling."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
from click.testing import CliRunner
from sqlalchemy import select
from sqlalchemy.orm import Session

import registry
from registry import testing
from registry.cli.main import cli
from registry.share.log_import import import_logs
from registry.share.overlay import SHARED_BASE, OverlayStorage, open_overlay
from registry.store.sql.models import Model, TuningRecord
from registry.store.sql.store import Store
from tests.pg_roles import empty, granted_roles, require_postgresql
from tests.rows import rows_of
from tests.test_transfer import sibling  # noqa: F401 - a fixture: the tiny model's operator at other shapes

QUICK = ("--tune-trials", "0", "--candidates", "2")


def run(*args) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args])


def report(result) -> dict:
    assert result.exit_code == 0, result.output
    out = result.stdout
    return json.loads(out[out.index("{") :])


def sources(result) -> list[str]:
    return [t["source"] for t in report(result)["tasks"]]


def records(url: str) -> list[TuningRecord]:
    with Session(Store(url).engine) as s:
        return s.execute(select(TuningRecord).order_by(TuningRecord.id)).scalars().all()


@pytest.fixture(scope="module")
def pg_shared(request, tuned_logs):
    """The tiny model's tuned records in the run's PostgreSQL scratch database, with a read-only and a writer role."""
    require_postgresql()
    owner = request.getfixturevalue("pg_server_url")
    empty(owner)
    with Store(owner) as store:
        import_logs(store, tuned_logs.work_dir, model="tiny")
    with granted_roles(owner) as roles:
        yield roles


def test_a_read_only_role_transfers_through_an_overlay_and_syncs_it_later(pg_shared, sibling, tmp_path):  # noqa: F811
    reader, before = pg_shared["reader"], rows_of(pg_shared["owner"])

    refused = run("--db", reader, "transfer", sibling, *QUICK)
    assert refused.exit_code == 1 and "Traceback" not in refused.output, refused.output
    assert len(refused.stderr.splitlines()) == 1 and refused.stderr.startswith("Error: "), refused.stderr

    local = tmp_path / "local.db"
    [task] = report(run("--db", reader, "transfer", sibling, "--overlay", local, *QUICK, "--json"))["tasks"]
    assert task["source"] == "transferred" and task["donor_record_id"] >= SHARED_BASE, task  # a shared donor
    assert rows_of(pg_shared["owner"]) == before
    [mine] = records(f"sqlite:///{local}")
    assert (mine.source, mine.model, mine.donor_record_id) == ("transferred", "sibling", None)
    origin = Store(f"sqlite:///{local}").registry_id()

    assert run("sync", local, pg_shared["writer"]).exit_code == 0
    pushed = [r for r in records(pg_shared["owner"]) if r.source == "transferred"]
    assert [(r.trace_hash, r.origin, r.model) for r in pushed] == [(mine.trace_hash, origin, "sibling")]
    # What was pushed is read back from the shared registry: an exact hit, through a fresh overlay.
    assert sources(run("--db", reader, "transfer", sibling, "--overlay", tmp_path / "fresh.db", *QUICK, "--json")) == [
        "exact"
    ]


def test_an_sqlite_registry_under_an_overlay_is_never_written(tuned_logs, sibling, tmp_path):  # noqa: F811
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    with Store(shared) as store:
        import_logs(store, tuned_logs.work_dir, model="tiny")
    before, local = rows_of(shared), tmp_path / "local.db"

    def command(*args) -> object:
        return run("--db", shared, *args, "--overlay", local, "--json")

    assert sources(command("transfer", sibling, *QUICK)) == ["transferred"]
    # The overlay's own record; from Python as from the command line.
    again = registry.transfer(sibling, db=tmp_path / "shared.db", overlay=local, tune_trials=0)
    assert [t.source for t in again.tasks] == ["exact"]
    tuned = report(command("tune", sibling, "--trials", "3"))
    assert tuned["tasks"][0]["trials"] == 3, tuned
    assert rows_of(shared) == before
    assert sorted({r.source for r in records(f"sqlite:///{local}")}) == ["transferred", "tuned"]
    with Store(f"sqlite:///{local}").read() as s:
        assert s.execute(select(Model.name)).scalars().all() == ["sibling"]


def test_reads_merge_both_registries_in_preference_order(tmp_path):
    """No TVM: the same workload and device in both, numbered differently, answer as one registry."""
    dev = testing.device()
    shared = Store(f"sqlite:///{tmp_path / 'shared.db'}")
    shared.ingest([testing.workload(9), testing.workload(0)], [testing.record(0, j, dev) for j in (0, 1)])
    imported = dataclasses.replace(testing.record(0, 2, dev, source="imported"), origin="another-registry")
    shared.ingest([], [imported])  # trusted less: last, however fast
    store = open_overlay(shared.url, str(tmp_path / "local.db"))
    assert isinstance(store, OverlayStorage)
    store.ingest([testing.workload(0)], [testing.record(0, 3, dev)])
    wid = store.workload_ids([(testing.shash(0), "structural")])[(testing.shash(0), "structural")]
    did = store.add_device(dev)
    assert (wid, did) == (1, 1)  # the overlay's own ids

    best = store.top_k(wid, did, 10)
    assert len(best) == 4 and [r.tier for r in best] == [0, 0, 0, 1]
    assert [r.mean_s for r in best[:3]] == sorted(r.mean_s for r in best[:3])
    assert sum(r.id < SHARED_BASE for r in best) == 1 and {r.workload_id for r in best} == {wid}
    state = store.tuning_state(wid, did)
    assert (state.tuned, len(state.traces)) == (3, 4)
    assert store.count_records(did) == 4

    theirs = SHARED_BASE + shared.workload_ids([(testing.shash(0), "structural")])[(testing.shash(0), "structural")]
    assert set(dict(store.indexed_embeddings())) == {wid, theirs}  # workload 9 has no records: not indexed
    assert store.indexed_set().count == 2
    donors = store.donor_records([theirs], 1, dev.kind)
    assert [(d.record.id >= SHARED_BASE, d.device_id) for d in donors] == [(True, did)]  # the overlay's device
    assert store.workloads_by_id([theirs])[theirs].shash == testing.shash(0)
    store.close()
    shared.close()


def test_a_record_naming_a_shared_donor_is_written_without_the_link(tmp_path):
    dev = testing.device()
    with Store(f"sqlite:///{tmp_path / 'shared.db'}") as shared:
        shared.ingest([testing.workload(0)], [testing.record(0, 0, dev)])
        store = open_overlay(shared.url, str(tmp_path / "local.db"))
    transferred = dataclasses.replace(testing.record(0, 1, dev, source="transferred"), donor_record_id=SHARED_BASE + 1)
    assert store.ingest([testing.workload(0)], [transferred]).records_new == 1
    [written] = records(f"sqlite:///{tmp_path / 'local.db'}")
    assert (written.source, written.donor_record_id) == ("transferred", None)
    store.close()


def test_the_overlay_composes_record_reads_and_leaves_the_rest_to_the_overlay(tmp_path):
    """Each of RecordReads's methods is the overlay storage's own (merging both stores); every other storage method
    is the overlay file's, bound to it; a name outside the protocol is an AttributeError, not forwarded."""
    from registry.store.interface import RecordReads, RegistryStorage

    Store(f"sqlite:///{tmp_path / 'shared.db'}").close()
    store = open_overlay(f"sqlite:///{tmp_path / 'shared.db'}", str(tmp_path / "local.db"))
    reads = {n for n in vars(RecordReads) if not n.startswith("_") and callable(vars(RecordReads)[n])}
    every = {n for p in RegistryStorage.__mro__ for n, v in vars(p).items() if not n.startswith("_") and callable(v)}
    assert len(reads) == 13 and len(every) > 40
    assert all(name in vars(OverlayStorage) for name in reads)
    composed = reads | {"efforts", "ingest", "ingest_batches", "add_device", "close"}
    for name in every - composed:  # the overlay's own: a plain call of the overlay store's method
        assert f"self.overlay.{name}(" in inspect.getsource(vars(OverlayStorage)[name]), name
    assert store.registry_id() == store.overlay.registry_id() != store.shared.registry_id()
    assert store.overlay.engine is not None
    with pytest.raises(AttributeError):
        store.engine  # noqa: B018 - the SQL store's own attribute, not a storage method
    store.close()
