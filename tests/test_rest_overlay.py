"""``registry transfer|tune --db http://SERVER --overlay local.db`` (issue 55): a served registry read over HTTP
(``RestStorage``) as the shared side of an overlay, which takes every write. Real TVM on the session's tiny tuned
model and a sibling, against a registry served on a loopback port; the same run against the same records in an
SQLite file is the reference."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.share.log_import import import_logs
from registry.share.overlay import SHARED_BASE
from registry.share.remote import RemoteError
from registry.share.rest_storage import RestStorage
from registry.store.sql.store import Store
from tests.rows import rows_of
from tests.server import make_token, refused, request, serving
from tests.test_overlay import QUICK, records, report, run
from tests.test_transfer import sibling  # noqa: F401 - a fixture: the tiny model's operator at other shapes


def served_tables(url: str) -> dict:
    """The served registry's rows, without the server's own bookkeeping of tokens (their last use)."""
    return {k: v for k, v in rows_of(url).items() if "token" not in k}


def shared_registry(url: str, logs) -> str:
    with Store(url) as store:
        import_logs(store, logs.work_dir, model="tiny")
    return url


def tasks(result) -> list[tuple]:
    return [(t["source"], t["donor_record_id"]) for t in report(result)["tasks"]]


# One candidate measured: the two doors must offer the same donor first; with two, the faster of two close timings
# won, and CI once saw the served transfer keep the other donor.
FIRST = ("--tune-trials", "0", "--candidates", "1")


def transfers_alike(shared: str, sibling_model, tmp_path) -> None:  # noqa: F811
    """What the served ``shared`` gives through an overlay is what the database gives, and it is never written."""
    reference = tasks(
        run("--db", shared, "transfer", sibling_model, "--overlay", tmp_path / "ref.db", *FIRST, "--json")
    )
    assert [s for s, _ in reference] == ["transferred"] and reference[0][1] >= SHARED_BASE, reference
    with serving(shared) as base:
        token = make_token(shared, "reader")
        before = served_tables(shared)
        local = tmp_path / "local.db"
        env = {"REGISTRY_TOKEN": token}
        got = CliRunner(env=env).invoke(
            cli,
            ["--db", base, "transfer", str(sibling_model), "--overlay", str(local), *FIRST, "--json"],
        )
        assert tasks(got) == reference
        assert served_tables(shared) == before
        [mine] = records(f"sqlite:///{local}")
        assert (mine.source, mine.model, mine.donor_record_id) == ("transferred", "sibling", None)
        # The overlay's own record is an exact hit now, read back through the overlay.
        again = CliRunner(env=env).invoke(
            cli,
            ["--db", base, "transfer", str(sibling_model), "--overlay", str(local), *FIRST, "--json"],
        )
        assert [s for s, _ in tasks(again)] == ["exact"]
        assert served_tables(shared) == before


def test_a_transfer_through_a_served_registry_matches_one_through_its_database(tuned_logs, sibling, tmp_path):  # noqa: F811
    shared = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    transfers_alike(shared, sibling, tmp_path)


def test_on_postgresql_too(request, tuned_logs, sibling, tmp_path):  # noqa: F811
    from tests.pg_roles import empty, require_postgresql

    require_postgresql()
    owner = request.getfixturevalue("pg_server_url")
    empty(owner)
    transfers_alike(shared_registry(owner, tuned_logs), sibling, tmp_path)


def test_tune_through_a_served_registry_writes_the_overlay_only(tuned_logs, sibling, tmp_path):  # noqa: F811
    shared = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    with serving(shared) as base:
        token_file = tmp_path / "token"
        token_file.write_text(make_token(shared, "reader"))
        before, local = served_tables(shared), tmp_path / "local.db"
        tuned = report(
            run(
                "--db", base, "tune", sibling, "--overlay", local, "--token-file", token_file, "--trials", "3", "--json"
            )
        )
        assert tuned["tasks"][0]["trials"] == 3, tuned
        assert served_tables(shared) == before
        assert {r.source for r in records(f"sqlite:///{local}")} == {"tuned"}


def test_from_python_with_the_token_from_the_environment(tuned_logs, sibling, tmp_path, monkeypatch):  # noqa: F811
    import registry

    shared = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    with serving(shared) as base:
        monkeypatch.setenv("REGISTRY_TOKEN", make_token(shared, "reader"))
        before = served_tables(shared)
        done = registry.transfer(sibling, db=base, overlay=tmp_path / "local.db", tune_trials=0)
        assert [t.source for t in done.tasks] == ["transferred"]
        assert served_tables(shared) == before


def test_without_a_token_or_an_overlay_one_line(tuned_logs, sibling, tmp_path):  # noqa: F811
    shared = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    with serving(shared) as base:
        make_token(shared, "reader")
        before, local = served_tables(shared), tmp_path / "local.db"
        no_token = refused("--db", base, "transfer", str(sibling), "--overlay", str(local), *QUICK)
        assert "token" in no_token.lower(), no_token
        for command in ("transfer", "tune"):  # without --overlay, a run writes to the server: a writer's token
            line = refused("--db", base, command, str(sibling), *QUICK[:0])
            assert "writer's token" in line and "--overlay FILE" in line, line
        assert served_tables(shared) == before


def test_record_reads_travel_and_are_bounded(tuned_logs, tmp_path):
    """Each RecordReads read over HTTP answers what the database answers; a count out of bounds is a problem."""
    url = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    with serving(url) as base, Store(url) as db:
        token = make_token(url, "reader")
        rest = RestStorage(base, token)
        [device] = db.all_devices()
        counts = db.ok_record_counts(device.id)
        wids = sorted(counts)
        ids = db.workloads_by_id(wids)
        idents = [(w.shash, w.module_equality) for w in ids.values()]
        assert rest.workload_ids(idents) == db.workload_ids(idents)
        assert rest.workloads_by_id(wids) == ids
        assert rest.ok_record_counts(device.id) == counts
        assert rest.count_records(device.id) == db.count_records(device.id)
        assert rest.top_k(wids[0], device.id, 3) == db.top_k(wids[0], device.id, 3)
        assert rest.tuning_state(wids[0], device.id) == db.tuning_state(wids[0], device.id)
        assert rest.donor_records(wids, 2, "llvm") == db.donor_records(wids, 2, "llvm")
        assert rest.latest_predictor(device.id) == db.latest_predictor(device.id)
        assert rest.indexed_set() == db.indexed_set()
        assert rest.indexed_embeddings() == db.indexed_embeddings()
        with rest.device_records(device.id) as theirs, db.device_records(device.id) as mine:
            assert theirs.workloads == mine.workloads and list(theirs.records) == list(mine.records)
        answer = request(f"{base}/api/v1/storage/top_k?args=" + '{"workload_id":1,"device_id":1,"k":100000}', token)
        assert answer.status == 422 and "k is not between" in answer.json()["detail"], answer.body


def test_a_device_with_too_many_records_is_one_line(tuned_logs, tmp_path, monkeypatch):
    import registry.server.storage_api as storage_api

    url = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    monkeypatch.setattr(storage_api, "MAX_DEVICE_RECORDS", 1)
    with serving(url) as base, Store(url) as db:
        [device] = db.all_devices()
        rest = RestStorage(base, make_token(url, "reader"))
        with pytest.raises(RemoteError, match="registry pull URL") as e, rest.device_records(device.id):
            pass
        assert len(str(e.value).splitlines()) == 1


@pytest.mark.tvm
def test_verify_by_url_measures_the_servers_claims_here_and_keeps_nothing_there(tuned_logs, tmp_path):
    shared = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    mine = f"sqlite:///{tmp_path / 'mine.db'}"
    shutil.copy(tmp_path / "shared.db", tmp_path / "mine.db")
    with serving(shared) as base:
        env = {"REGISTRY_TOKEN": make_token(shared, "reader")}
        before = served_tables(shared)
        by_url = report(CliRunner(env=env).invoke(cli, ["--db", base, "verify", "--limit", "4", "--json"]))
        direct = report(CliRunner().invoke(cli, ["--db", mine, "verify", "--limit", "4", "--json"]))
        assert served_tables(shared) == before  # the verdicts are not the server's
        said = CliRunner(env=env).invoke(cli, ["--db", base, "verify", "--limit", "2"])
        assert said.exit_code == 0 and "reported, not kept" in said.output, said.output
    claimed = [(r["record_id"], r["claimed_us"]) for r in by_url["rows"]]
    assert len(claimed) == 4 and claimed == [(r["record_id"], r["claimed_us"]) for r in direct["rows"]]
    assert {r["verdict"] for r in by_url["rows"]} <= {"verified", "disputed"}
    assert all(r["measured_us"] for r in by_url["rows"]), by_url["rows"]  # rebuilt from the traces sent, and timed
