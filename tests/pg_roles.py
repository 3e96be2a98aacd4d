"""A read-only and a writer role on the run's PostgreSQL scratch database, for the tests of shared registries."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from registry.cli.main import cli
from tests.conftest import PG_ENV


def require_postgresql() -> None:
    """Skip unless PG_ENV names a PostgreSQL server that answers."""
    admin = os.environ.get(PG_ENV)
    if not admin:
        pytest.skip(f"{PG_ENV} is not set")
    probe = create_engine(make_url(admin).set(drivername="postgresql+psycopg"), connect_args={"connect_timeout": 3})
    try:
        probe.connect().close()
    except OperationalError as e:
        pytest.skip(f"PostgreSQL at {admin} does not answer: {e.orig}")
    finally:
        probe.dispose()


def empty(owner_url: str) -> None:
    engine = create_engine(owner_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@contextlib.contextmanager
def granted_roles(owner_url: str) -> Iterator[dict]:
    """A read-only and a writer role granted on the registry at ``owner_url`` by `registry db grant` (names unique
    to this run, dropped after): their URLs as "reader" and "writer", the owner's as "owner", and "names"."""
    suffix = uuid.uuid4().hex[:8]
    reader, writer = f"reader_{suffix}", f"writer-{suffix}"  # a dash: the names must be quoted to work
    engine = create_engine(owner_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for role in (reader, writer):
            conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
    try:
        for role, flag in ((reader, "--read-only"), (writer, "--writer")):
            result = CliRunner().invoke(cli, ["--db", owner_url, "db", "grant", role, flag])
            assert result.exit_code == 0 and role in result.stdout, result.output
        as_role = {
            r: make_url(owner_url).set(username=r).render_as_string(hide_password=False) for r in (reader, writer)
        }
        yield {"owner": owner_url, "reader": as_role[reader], "writer": as_role[writer], "names": (reader, writer)}
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'DROP OWNED BY "{reader}", "{writer}"'))
            conn.execute(text(f'DROP ROLE "{reader}", "{writer}"'))
        engine.dispose()
