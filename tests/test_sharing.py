"""Sharing between registries: bundles and sync keep provenance, keep every origin's measurement, are incremental,
and refuse bad input in one line with both registries left as they were. Real TVM logs, real SQLite and PostgreSQL."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from registry.cli.main import cli
from registry.store.sql.models import RegistryInfo, TuningRecord
from registry.store.sql.store import Store
from registry.tvm_side import tvmlog
from tests.rows import rows_of
from tests.tvm_env import measured_here

pytestmark = pytest.mark.tvm


def run(*args: str):
    result = CliRunner().invoke(cli, list(args))
    return result


def ok(*args: str) -> dict:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout[result.stdout.index("{") :])  # progress and warnings go to stderr


def refused(*args: str) -> str:
    """The one line a refused command prints; asserts there is exactly one and no traceback."""
    result = CliRunner().invoke(cli, list(args))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def counts(url: str) -> dict[str, int]:
    with Store(url) as store, store.read() as s:
        rows = s.execute(select(TuningRecord.origin, TuningRecord.trust, func.count()).group_by(
            TuningRecord.origin, TuningRecord.trust)).all()  # fmt: skip
    return {f"{o}:{t}": n for o, t, n in rows}


def registry_id(url: str) -> str:
    with Store(url) as store, store.read() as s:
        return s.execute(select(RegistryInfo.registry_id)).scalar_one()


def logged(tuned_logs) -> int:
    """The records in the session's tuned logs."""
    return sum(1 for _ in tvmlog.read_records(tvmlog.find_logs(tuned_logs.work_dir)[0].record_file))


@pytest.fixture
def team_a(tuned_logs, tmp_path) -> str:
    """The even-numbered records of the logs, as if this registry had measured them."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with Store(url) as store:
        assert (
            measured_here(store, tuned_logs.work_dir, "a", keep=lambda i: i % 2 == 0) == (logged(tuned_logs) + 1) // 2
        )
    return url


@pytest.fixture
def team_b(tuned_logs, tmp_path) -> str:
    """The odd-numbered records of the logs."""
    url = f"sqlite:///{tmp_path / 'b.db'}"
    with Store(url) as store:
        assert measured_here(store, tuned_logs.work_dir, "b", keep=lambda i: i % 2 == 1) == logged(tuned_logs) // 2
    return url


def test_bundle_round_trip_keeps_provenance_and_is_idempotent(team_a, tmp_path):
    bundle = tmp_path / "a.bundle"
    info = ok("--db", team_a, "export", "--bundle", str(bundle))
    assert info["records"] == sum(counts(team_a).values()) and info["origin"] == registry_id(team_a)
    dst = f"sqlite:///{tmp_path / 'c.db'}"
    first = ok("--db", dst, "import", str(bundle))
    assert first["records_new"] == info["records"]
    again = ok("--db", dst, "import", str(bundle))
    assert again["records_new"] == 0 and again["records_present"] == info["records"]
    assert counts(dst) == {f"{registry_id(team_a)}:imported": info["records"]}
    rows = ok("--db", dst, "lookup", "--top-k", "100")["rows"]
    assert {r["team"] for r in rows} == {"a"} and {r["trust"] for r in rows} == {"imported"}
    src_rows = ok("--db", team_a, "lookup", "--top-k", "100")["rows"]
    # the same measurements, taken at the same times, on the same device
    key = lambda r: (r["workload"], r["latency_us"], r["created_at"][:19], r["device"])  # noqa: E731
    assert sorted(map(key, rows)) == sorted(map(key, src_rows))
    assert {r["trust"] for r in src_rows} == {"measured"}


def test_a_record_back_home_is_measured_again_not_imported(team_a, tmp_path):
    bundle = tmp_path / "a.bundle"
    ok("--db", team_a, "export", "--bundle", str(bundle))
    before = counts(team_a)
    assert ok("--db", team_a, "import", str(bundle))["records_new"] == 0
    assert counts(team_a) == before


def test_two_teams_sync_into_one_registry_exactly_the_union(team_a, team_b, db_url, tuned_logs):
    total = logged(tuned_logs)
    a = ok("sync", team_a, db_url)
    b = ok("sync", team_b, db_url)
    assert a["records_new"] + b["records_new"] == total and not a["incremental"]
    assert counts(db_url) == {
        f"{registry_id(team_a)}:imported": a["records_new"],
        f"{registry_id(team_b)}:imported": b["records_new"],
    }
    teams = {r["team"] for r in ok("--db", db_url, "lookup", "--top-k", "100")["rows"]}
    assert teams == {"a", "b"}
    # re-syncing adds nothing, and reads nothing: the destination remembers how far it got
    again = ok("sync", team_a, db_url)
    assert again["incremental"] and again["records_read"] == 0 and again["records_new"] == 0
    assert ok("sync", team_a, db_url, "--full")["records_new"] == 0


def test_incremental_sync_reads_only_what_is_new(tuned_logs, tmp_path, db_url):
    src = f"sqlite:///{tmp_path / 'src.db'}"
    with Store(src) as store:
        first = measured_here(store, tuned_logs.work_dir, "a", keep=lambda i: i < 8)
    assert ok("sync", src, db_url)["records_new"] == first
    with Store(src) as store:
        more = measured_here(store, tuned_logs.work_dir, "a", keep=lambda i: i >= 8)
    result = ok("sync", src, db_url)
    assert result["incremental"] and result["records_read"] == more and result["records_new"] == more


def test_the_same_schedule_measured_by_two_registries_is_kept_twice(tuned_logs, tmp_path, db_url):
    one, two = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
    for url, team in ((one, "a"), (two, "b")):
        with Store(url) as store:
            n = measured_here(store, tuned_logs.work_dir, team)
    ok("sync", one, db_url)
    ok("sync", two, db_url)
    assert counts(db_url) == {f"{registry_id(one)}:imported": n, f"{registry_id(two)}:imported": n}
    # one best per (workload, device) all the same
    rows = ok("--db", db_url, "lookup")["rows"]
    assert len(rows) == len({r["workload"] for r in rows}) and rows[0]["records"] == 2 * n


def test_sync_filters(team_a, tmp_path):
    dst = f"sqlite:///{tmp_path / 'dst.db'}"
    assert ok("sync", team_a, dst, "--team", "nobody")["records_read"] == 0
    assert ok("sync", team_a, dst, "--model", "tiny")["records_new"] == sum(counts(team_a).values())
    assert ok("sync", team_a, dst, "--since", "2999-01-01")["records_read"] == 0


def test_a_registry_does_not_sync_into_itself(team_a):
    assert "same registry" in refused("sync", team_a, team_a)


def _tamper(bundle: Path, out: Path, member: str, edit) -> Path:
    with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            dst.writestr(item.filename, edit(data) if item.filename == member else data)
    return out


@pytest.mark.parametrize(
    "member, edit, says",
    [
        ("records.jsonl", lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], "checksum"),
        ("records.jsonl", lambda d: d[: len(d) // 2], "truncated or altered"),
        ("manifest.json", lambda d: d.replace(b'"version": 1', b'"version": 7'), "newer"),
        ("manifest.json", lambda d: b"{", "manifest"),
    ],
    ids=["altered", "truncated-member", "newer-format", "bad-manifest"],
)
def test_a_bad_bundle_is_one_line_and_changes_nothing(team_a, tmp_path, db_url, member, edit, says):
    bundle = tmp_path / "a.bundle"
    ok("--db", team_a, "export", "--bundle", str(bundle))
    Store(db_url).close()
    before = rows_of(db_url)
    bad = _tamper(bundle, tmp_path / "bad.bundle", member, edit)
    assert says in refused("--db", db_url, "import", str(bad)).lower()
    assert rows_of(db_url) == before


def test_a_truncated_bundle_file_is_one_line(team_a, tmp_path, sqlite_url):
    bundle = tmp_path / "a.bundle"
    ok("--db", team_a, "export", "--bundle", str(bundle))
    cut = tmp_path / "cut.bundle"
    cut.write_bytes(bundle.read_bytes()[:-200])
    Store(sqlite_url).close()
    before = rows_of(sqlite_url)
    # without its central directory a cut zip is no zip: it is refused as a log that is not JSON instead
    assert refused("--db", sqlite_url, "import", str(cut))
    assert rows_of(sqlite_url) == before


def test_sync_from_a_missing_or_unreachable_registry_is_one_line(tmp_path, sqlite_url):
    assert refused("sync", f"sqlite:///{tmp_path / 'missing.db'}", sqlite_url)
    assert refused("sync", "postgresql://nobody@127.0.0.1:1/none", sqlite_url)
    assert not Path(sqlite_url.removeprefix("sqlite:///")).exists()


def test_sync_between_schema_revisions_is_refused(team_a, tmp_path):
    from sqlalchemy import text

    from registry.store.sql import schema
    from registry.store.sql.engine import create

    old = f"sqlite:///{tmp_path / 'old.db'}"
    Store(old).close()
    engine = create(old)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {schema.VERSION_TABLE} SET version_num = '0002'"))
    engine.dispose()
    before = rows_of(old)
    assert "registry db upgrade" in refused("sync", team_a, old)
    assert rows_of(old) == before


def test_sqlite_hands_over_the_records_the_generic_read_does(team_a, monkeypatch):
    """A SQLite source is read a chunk at a time as one JSON aggregate (exchange._sqlite_chunks); what it hands over,
    donors and times included, is what the row-by-row read of any other database gives."""
    from sqlalchemy import text

    from registry.store.sql import exchange
    from registry.store.values import ExchangeFilters

    store = Store(team_a)
    with store.engine.begin() as conn:  # some records transferred from the first one
        conn.execute(
            text("UPDATE tuning_record SET donor_record_id = (SELECT min(id) FROM tuning_record) WHERE id % 3 = 0")
        )

    def read_all() -> list:
        with store.read_exchange(ExchangeFilters(), after_id=1) as ex:
            return [r for chunk in ex.records() for r in chunk]

    monkeypatch.setattr(exchange, "CHUNK", 3)  # several chunks
    by_json = read_all()
    monkeypatch.setattr(exchange, "_sqlite_chunks", exchange._row_chunks)
    by_rows = read_all()
    store.close()
    assert by_json == by_rows
    assert len(by_json) > 3 and any(r.donor for r in by_json) and all(r.created_at.year > 2000 for r in by_json)


def test_a_sync_refused_in_a_later_chunk_leaves_no_reader_behind(team_a, tmp_path, monkeypatch):
    """Chunks are read one ahead by a helper thread (exchange._one_ahead). A record refused in a later chunk ends the
    read while the next chunk is in flight: the sync is one line, writes nothing, and leaves no thread reading."""
    import threading

    from sqlalchemy import text

    from registry.store.sql import exchange

    with Store(team_a) as store, store.engine.begin() as conn:
        conn.execute(
            text("UPDATE tuning_record SET run_secs_json = '[-1.0]' WHERE id = (SELECT max(id) - 4 FROM tuning_record)")
        )
    monkeypatch.setattr(exchange, "CHUNK", 3)  # the bad record is in a later chunk, with one more after it
    dst = f"sqlite:///{tmp_path / 'dst.db'}"
    assert "latenc" in refused("sync", team_a, dst)
    assert counts(dst) == {}
    assert not [t for t in threading.enumerate() if t.name.startswith("registry-read")]
    assert ok("sync", team_a, dst, "--skip-invalid")["records_skipped"] == 1


@pytest.mark.tvm
def test_what_a_bundle_says_of_its_origin_never_raises_trust(sqlite_url, tuned_logs, tmp_path):
    """Records claiming to have been measured by the very registry that imports them (its id is printed in every
    bundle it exports) were stored as "measured", as trusted as its own: trust is decided by the reader."""
    import hashlib
    import zipfile

    from registry.store.sql.store import Store

    source = tmp_path / "source.db"
    bundle = tmp_path / "out.bundle"
    for args in (["--db", str(source), "import", str(tuned_logs.work_dir)], ["--db", str(source), "export",
                 "--bundle", str(bundle)]):  # fmt: skip
        assert CliRunner().invoke(cli, args).exit_code == 0
    with Store(sqlite_url) as store:
        here = store.registry_id()
    with zipfile.ZipFile(bundle) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    rows = [json.loads(line) for line in members["records.jsonl"].splitlines()]
    for row in rows:
        row[7] = here  # origin: the destination itself
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    manifest = json.loads(members["manifest.json"])
    manifest["members"]["records.jsonl"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    members["records.jsonl"], members["manifest.json"] = data, json.dumps(manifest).encode()
    forged = tmp_path / "forged.bundle"
    with zipfile.ZipFile(forged, "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    done = CliRunner().invoke(cli, ["--db", sqlite_url, "import", str(forged)])
    assert done.exit_code == 0, done.output
    trusts = json.loads(CliRunner().invoke(cli, ["--db", sqlite_url, "lookup", "--json"]).stdout)["rows"]
    assert trusts and {r["trust"] for r in trusts} == {"imported"}
