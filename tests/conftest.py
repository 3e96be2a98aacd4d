"""Shared fixtures: one database per test on every backend, and one real (tiny) tuning run per session."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PG_ENV = "REGISTRY_TEST_DATABASE_URL"
# Where CI's and the developers' machines run PostgreSQL (trust auth, database `test`): used when PG_ENV is unset.
LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/test"
_pg_skipped: list[str] = []
_browser_skipped: list[str] = []
NO_BROWSER = "no headless browser"  # the start of the skip reason of tests/test_report.py and tests/test_web_view.py


def pytest_configure(config) -> None:
    """Without PG_ENV, the suite looks for the local server itself: a third of the tests run on both backends, and
    ran on SQLite alone, silently, when the variable was not set."""
    if os.environ.get(PG_ENV):
        return
    import socket

    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        return
    try:
        engine = create_engine(make_url(LOCAL_PG).set(drivername="postgresql+psycopg"))
        with engine.connect():
            pass
        engine.dispose()
    except Exception:  # noqa: BLE001 - a server that will not have us: the tests skip, and the summary says so
        return
    os.environ[PG_ENV] = LOCAL_PG


def pytest_runtest_logreport(report) -> None:
    if report.skipped and f"{PG_ENV} is not set" in str(report.longrepr):
        _pg_skipped.append(report.nodeid)
    if report.skipped and NO_BROWSER in str(report.longrepr):
        _browser_skipped.append(report.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:
    """Say it loudly when the PostgreSQL half of the suite, or the tests in a real browser, did not run."""
    if _pg_skipped:
        terminalreporter.write_sep(
            "!", f"{len(_pg_skipped)} test(s) skipped: no PostgreSQL ({PG_ENV} unset, none at 127.0.0.1:5432)"
        )
    if _browser_skipped:
        terminalreporter.write_sep(
            "!", f"{len(_browser_skipped)} test(s) skipped: no headless Chromium (`make browser` installs it)"
        )


@pytest.fixture(scope="session")
def pg_server_url():
    """A scratch PostgreSQL database for this run, created and dropped here; skips when PG_ENV is unset."""
    admin = os.environ.get(PG_ENV)
    if not admin:
        pytest.skip(f"{PG_ENV} is not set")
    admin_url = make_url(admin).set(drivername="postgresql+psycopg")
    name = f"registry_test_{uuid.uuid4().hex[:10]}"
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield admin_url.set(database=name).render_as_string(hide_password=False)
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


def _empty_pg(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        # A connection left in a transaction by an earlier test would block this forever: fail it instead.
        conn.execute(text("SET lock_timeout = '60s'"))
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path: Path) -> str:
    """An empty database on each backend: an SQLite file, and the run's PostgreSQL scratch database emptied."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'registry.db'}"
    url = request.getfixturevalue("pg_server_url")
    _empty_pg(url)
    return url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'registry.db'}"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """No test touches the user's real registry."""
    monkeypatch.setenv("REGISTRY_HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("REGISTRY_DATABASE_URL", raising=False)


@pytest.fixture(scope="session")
def tuned_logs(tmp_path_factory):
    """Logs of a real tuning run by plain MetaSchedule (its own JSONDatabase), shared by the whole session."""
    from registry.tvm_side.target import host_target
    from tests.tvm_env import TunedLogs, tiny_model, tune_with_plain_tvm

    work_dir = tmp_path_factory.mktemp("plain_tvm_logs")
    model = tiny_model()
    target = host_target()
    tune_with_plain_tvm(work_dir, model, target)
    return TunedLogs(work_dir, model, target)


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    """A two-task ONNX model for real tuning runs: 16x128 @ 128x256 + relu, and 16x256 @ 256x128."""
    import onnx

    from registry.tvm_side import zoo

    path = tmp_path / "mlp.onnx"
    onnx.save(zoo.mlp(16, (128, 256, 128)), path)
    return path
