"""The migrations and the models must describe the same schema; old and unknown revisions are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from click.testing import CliRunner
from registry.cli.main import cli
from sqlalchemy import text

from registry.errors import SchemaOutdatedError
from registry.store import migrate, schema
from registry.store.engine import create
from registry.store.models import Base
from registry.store.store import Store


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
