"""A registry's file where the machine is against it: a read-only filesystem, a user who may not write it, a full
disk, another writer holding its lock, an empty server database that a refused import set up. Each is one line and
leaves the registry as it was. Real filesystems: tmpfs mounts (root only; skipped, saying so, elsewhere)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.store.sql import engine
from registry.tvm_side import tvmlog
from tests.rows import rows_of

pytestmark = pytest.mark.tvm

REGISTRY = str(Path(sys.executable).with_name("registry"))


@pytest.fixture(scope="module")
def registry_file(tmp_path_factory, tuned_logs) -> Path:
    """An SQLite registry holding the suite's real records, and a bundle of them beside it."""
    folder = tmp_path_factory.mktemp("files")
    db = folder / "reg.db"
    for args in (["import", str(tuned_logs.work_dir)], ["export", "--bundle", str(folder / "all.bundle")]):
        done = CliRunner().invoke(cli, ["--db", str(db), *args])
        assert done.exit_code == 0, done.output
    return db


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"a tmpfs mount needs root and CAP_SYS_ADMIN: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _run(db: Path, *args: str, user: bool = False) -> subprocess.CompletedProcess:
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if user else []
    return subprocess.run(
        [*prefix, REGISTRY, "--db", str(db), *args], capture_output=True, text=True, cwd=db.parent,
        env={**os.environ, "HOME": str(db.parent)},
    )  # fmt: skip


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_error_line(done: subprocess.CompletedProcess, fragment: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], done.stderr


def test_a_registry_on_a_read_only_filesystem_can_be_read_not_written(registry_file, tmp_path):
    with _tmpfs(tmp_path / "ro", "16m") as mount:
        shutil.copy(registry_file, mount / "reg.db")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        db = mount / "reg.db"
        before = _digest(db)
        for args in (["stats"], ["lookup"], ["devices"], ["db", "current"], ["check"]):
            done = _run(db, *args)
            assert done.returncode == 0, (args, done.stderr)
        assert _run(db, "export", "--bundle", str(tmp_path / "out.bundle")).returncode == 0
        _one_error_line(_run(db, "import", str(registry_file.parent / "all.bundle")), f"cannot write the registry {db}")
        # each was an internal error: the index's temporary file, and a lock path taken from the read-only URI
        _one_error_line(_run(db, "index", "rebuild"), "cannot write the similarity index")
        _one_error_line(_run(db, "db", "upgrade"), f"cannot take the migration lock {mount / 'reg.migrate.lock'}")
        assert _digest(db) == before and sorted(p.name for p in mount.iterdir()) == ["reg.db"]


def test_a_user_who_may_not_write_the_registry_reads_it(registry_file, tmp_path):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root, to run the CLI as another user (setpriv)")
    folder = Path("/tmp") / f"registry-perm-{os.getpid()}"  # pytest's own temporary folders are root's alone
    folder.mkdir(mode=0o755)
    try:
        db = folder / "reg.db"
        shutil.copy(registry_file, db)
        db.chmod(0o644)
        bundle = folder / "all.bundle"
        shutil.copy(registry_file.parent / "all.bundle", bundle)
        bundle.chmod(0o644)
        if _run(db, "--help", user=True).returncode != 0:
            pytest.skip("this checkout's venv cannot be run by another user")
        before = _digest(db)
        assert _run(db, "stats", user=True).returncode == 0
        assert _run(db, "lookup", user=True).returncode == 0
        _one_error_line(_run(db, "import", str(bundle), user=True), f"cannot write the registry {db}")
        assert _digest(db) == before and sorted(p.name for p in folder.iterdir()) == ["all.bundle", "reg.db"]
    finally:
        shutil.rmtree(folder)


def test_a_bundle_onto_a_full_disk_is_one_line_and_no_partial_file(registry_file, tmp_path):
    with _tmpfs(tmp_path / "full", "64k") as mount:
        with contextlib.suppress(OSError), open(mount / "filler", "wb") as f:  # the disk, full to the last block
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        done = _run(registry_file, "export", "--bundle", str(mount / "x.bundle"))
        _one_error_line(done, "No space left on device")
        assert [p.name for p in mount.iterdir()] == ["filler"]


def test_a_writer_waits_for_another_writers_lock_says_so_and_gives_up(registry_file, tmp_path, monkeypatch):
    db = tmp_path / "locked.db"
    shutil.copy(registry_file, db)
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 2_500)
    monkeypatch.setattr(engine, "_said_waiting", set())
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(30)
        conn.execute("ROLLBACK")
        conn.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        held.wait(10)
        before = rows_of(f"sqlite:///{db}")
        done = CliRunner().invoke(cli, ["--db", str(db), "import", str(registry_file.parent / "all.bundle")])
    finally:
        release.set()
        holder.join()
    assert done.exit_code == 1, done.output
    warning, error = done.stderr.splitlines()
    assert warning.startswith("Warning: ") and "locked by another writer" in warning and "waiting up to" in warning
    assert error.startswith("Error: ") and "still locked by another writer" in error, error
    assert rows_of(f"sqlite:///{db}") == before


def test_a_refused_import_into_an_empty_database_leaves_it_empty(db_url, tuned_logs, tmp_path):
    """A fresh SQLite file or an empty PostgreSQL database: the refusal takes the registry's tables away again."""
    bad = tmp_path / "bad"
    shutil.copytree(tuned_logs.work_dir, bad)
    lines = (bad / tvmlog.RECORD_FILE).read_text().splitlines()
    (bad / tvmlog.RECORD_FILE).write_text("\n".join([*lines, "[0, {not json"]) + "\n")
    url = db_url if db_url.startswith("postgresql") else f"sqlite:///{tmp_path / 'new.db'}"
    assert rows_of(url) in ({}, {"files beside it": sorted(p.name for p in tmp_path.iterdir())})
    done = CliRunner().invoke(cli, ["--db", url, "import", str(bad)])
    assert done.exit_code == 1 and "not valid JSON" in done.stderr, done.output
    if url.startswith("postgresql"):
        assert rows_of(url) == {}  # no table at all: not even the version table
    else:
        assert not (tmp_path / "new.db").exists()


def test_sync_into_a_postgresql_database_that_does_not_exist_says_how_to_make_one(registry_file, pg_server_url):
    from sqlalchemy.engine import make_url

    missing = make_url(pg_server_url).set(database="registry_no_such_database").render_as_string(hide_password=False)
    done = CliRunner().invoke(cli, ["sync", str(registry_file), missing])
    assert done.exit_code == 1 and len(done.stderr.splitlines()) == 1, done.output
    assert 'database "registry_no_such_database" does not exist' in done.stderr and "createdb" in done.stderr
