"""The migrations and the models must describe the same schema; old and unknown revisions are refused."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from registry.cli.main import cli
from registry.errors import SchemaOutdatedError
from registry.store.sql import migrate, schema
from registry.store.sql.engine import create
from registry.store.sql.models import Base
from registry.store.sql.store import Store


def test_head_constant_matches_the_migrations():
    assert migrate.script_head() == schema.HEAD


def test_models_and_migrations_agree(db_url):
    store = Store(db_url)  # migrated to head by the migrations, not by create_all
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "version_table": schema.VERSION_TABLE})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == [], f"models differ from migrations: write a new revision ({diff})"


def _set_revision(url: str, revision: str) -> None:
    engine = create(url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {schema.VERSION_TABLE} SET version_num = :r"), {"r": revision})
    engine.dispose()


def test_an_older_revision_is_refused_naming_the_upgrade_command(db_url, monkeypatch):
    Store(db_url).close()
    # Pretend this registry is one revision newer than the database.
    monkeypatch.setattr(schema, "HEAD", f"{int(schema.HEAD) + 1:04d}")
    with pytest.raises(SchemaOutdatedError, match="registry db upgrade"):
        Store(db_url)
    result = CliRunner().invoke(cli, ["--db", db_url, "stats"])
    assert result.exit_code == 1
    assert "registry db upgrade" in result.output and "Traceback" not in result.output


def test_a_newer_unknown_revision_is_refused(db_url):
    Store(db_url).close()
    _set_revision(db_url, "9999")
    with pytest.raises(SchemaOutdatedError, match="newer registry"):
        Store(db_url)


def test_db_current_and_upgrade_commands(sqlite_url):
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", sqlite_url, "db", "current"])  # read-only: a missing file stays missing
    assert out.exit_code == 1 and "no registry at" in out.stderr
    assert not Path(sqlite_url.removeprefix("sqlite:///")).exists()
    out = runner.invoke(cli, ["--db", sqlite_url, "db", "upgrade"])
    assert out.exit_code == 0 and f"-> {schema.HEAD}" in out.output
    out = runner.invoke(cli, ["--db", sqlite_url, "db", "current"])
    assert "up to date" in out.output


def test_a_database_of_another_application_is_refused(sqlite_url):
    from registry.errors import DatabaseError

    engine = create(sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE invoices (id INTEGER PRIMARY KEY)"))
    engine.dispose()
    with pytest.raises(DatabaseError, match="not a registry"):
        Store(sqlite_url)
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "db", "upgrade"])
    assert result.exit_code == 1 and "not a registry" in result.output


def _old_registry(db_url: str, revision: str, records: list[dict], best: dict) -> None:
    """A registry at ``revision`` holding one device, workload and instruction list, ``records`` (tuning_record
    columns past the shared ones) and one best_record row."""
    engine = create(db_url)
    migrate.run_upgrade(engine, revision)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO device (id, key, name, kind, target_json, num_threads, host_model, tvm_version)"
                " VALUES (1, 'k', 'cpu', 'llvm', '{}', 1, 'cpu', '0.27.0')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workload (id, shash, module_equality, mod_json_z, args_info_json, op_kind, task_name,"
                " iter_kinds, extents_json, args_json, flops, embedding, tvm_version)"
                " VALUES (1, '1', 'structural', :z, '[]', 'matmul', 't', 'SSR', '[]', '[]', 1.0, :z, '0.27.0')"
            ),
            {"z": b"x"},
        )
        conn.execute(text("INSERT INTO trace_skeleton (id, hash, insts_json_z) VALUES (1, 'h', :z)"), {"z": b"x"})
        for record in records:
            names = ", ".join(record)
            values = ", ".join(f":{k}" for k in record)
            conn.execute(
                text(
                    "INSERT INTO tuning_record (workload_id, device_id, skeleton_id, decisions_json, run_secs_json,"
                    f" ok, tvm_version, tool_version, {names}) VALUES (1, 1, 1, '[]', '[]', true, '0.27.0', 't',"
                    f" {values})"
                ),
                record,
            )
        names, values = ", ".join(best), ", ".join(f":{k}" for k in best)
        conn.execute(text(f"INSERT INTO best_record (workload_id, device_id, {names}) VALUES (1, 1, {values})"), best)
    engine.dispose()


def test_0003_gives_old_records_an_origin_and_a_trust_and_prefers_measured_ones(db_url):
    """A registry written before provenance: imported records become "imported" from "tvm-log", the rest
    "measured" here; a pair whose best was an imported record now prefers its measured one."""
    records = [
        dict(id=rid, trace_hash=f"h{rid}", mean_s=mean, source=source)
        for rid, source, mean in ((1, "imported", 1e-6), (2, "tuned", 2e-6))
    ]
    _old_registry(db_url, "0002", records, dict(record_id=1, mean_s=1e-6, n_records=2))
    with pytest.raises(SchemaOutdatedError):
        Store(db_url)
    engine = create(db_url)
    migrate.run_upgrade(engine)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, origin, trust FROM tuning_record ORDER BY id")).all()
        best = conn.execute(text("SELECT record_id, tier, n_records FROM best_record")).one()
        own = conn.execute(text("SELECT registry_id FROM registry_info")).scalar_one()
    engine.dispose()
    assert [tuple(r) for r in rows] == [(1, "tvm-log", "imported"), (2, own, "measured")]
    assert tuple(best) == (2, 0, 2)


def test_a_writer_waits_for_a_migration_in_progress_instead_of_refusing_its_midway_revision(sqlite_url):
    """A fresh database another process is migrating shows 0002 for a while (SQLite commits each schema change): a
    writer that starts then must wait for that migration, not refuse the database as outdated (it did, now and then,
    in the concurrent-writers test)."""
    import subprocess
    import sys
    import time

    engine = create(sqlite_url)
    code = f"from registry.store.sql.store import Store; Store({sqlite_url!r}).close()"
    with schema._migration_lock(engine):  # this process is "migrating"
        migrate.run_upgrade(engine, "0002")
        writer = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
        lock = str(Path(make_url(sqlite_url).database).with_suffix(".migrate.lock"))
        deadline = time.monotonic() + 60
        # It reached the schema check and waits on the lock: blocked in flock(), the lock file open.
        while writer.poll() is None and time.monotonic() < deadline and not _waits_on(writer.pid, lock):
            time.sleep(0.05)
        assert writer.poll() is None and _waits_on(writer.pid, lock), writer.communicate()[1]
        migrate.run_upgrade(engine)
    _, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err


FLOCK = {"x86_64": 73, "aarch64": 32}[platform.machine()]  # the flock system call's number (Linux)


def _waits_on(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open and is blocked in flock()."""
    try:
        holds = any(os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd"))
        with open(f"/proc/{pid}/syscall") as f:
            return holds and f.read().split()[0] == str(FLOCK)
    except OSError:
        return False


def test_0004_drops_the_records_foreign_keys_and_keeps_every_row(db_url):
    """The records, their donors and the best records are as they were; only the per-row reference checks go (on
    SQLite the table is copied, and its old copy's drop must not cascade to the best records)."""
    records = [
        dict(id=1, trace_hash="h1", mean_s=1e-6, source="tuned", origin="here", trust="measured"),
        dict(
            id=2, trace_hash="h2", mean_s=2e-6, source="transferred", origin="here", trust="measured", donor_record_id=1
        ),
    ]
    _old_registry(db_url, "0003", records, dict(record_id=1, mean_s=1e-6, n_records=2, tier=0))
    engine = create(db_url)
    with engine.connect() as conn:
        before = [conn.execute(text(f"SELECT * FROM {t} ORDER BY 1")).all() for t in ("tuning_record", "best_record")]
    migrate.run_upgrade(engine)
    with engine.connect() as conn:
        after = [conn.execute(text(f"SELECT * FROM {t} ORDER BY 1")).all() for t in ("tuning_record", "best_record")]
        assert inspect(conn).get_foreign_keys("tuning_record") == []
        assert schema.current_revision(conn) == schema.HEAD
    engine.dispose()
    assert after == before and len(after[0]) == 2 and len(after[1]) == 1
