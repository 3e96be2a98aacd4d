"""Registries written by earlier releases upgrade to today's schema with nothing lost: one frozen registry per
earlier revision, on SQLite and PostgreSQL, each written by the registry of that revision from its own source
(tests/fixtures/upgrade/freeze.py), not rebuilt by today's code. After the upgrade the schema guards its values
(migration 0008): a record's source and trust, registry_info's single row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from registry.cli.main import cli
from registry.store.sql import migrate
from registry.store.sql.revision import HEAD, VERSION_TABLE

ASSETS = Path(__file__).parent / "fixtures" / "upgrade"
REVISIONS = sorted(p.stem.removeprefix("sqlite-") for p in ASSETS.glob("sqlite-*.db"))
TABLES = ("device", "workload", "trace_skeleton", "tuning_record", "best_record")


def _cli(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_every_earlier_revision_has_a_frozen_registry_on_both_backends():
    assert REVISIONS == sorted(migrate.known_revisions() - {HEAD})
    assert all((ASSETS / f"postgresql-{r}.sql").exists() for r in REVISIONS)


def _restore(db_url: str, revision: str) -> None:
    """The frozen registry of ``revision`` into ``db_url`` (an empty database)."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        shutil.copy(ASSETS / f"sqlite-{revision}.db", url.database)
        return
    # pg_dump's psql meta-commands (``\restrict``) are not SQL; everything else is run as it was dumped.
    dump = "\n".join(
        line for line in (ASSETS / f"postgresql-{revision}.sql").read_text().splitlines() if not line.startswith("\\")
    )
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(dump)
    engine.dispose()


def _counts(db_url: str) -> dict:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        counts = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES}
        counts["revision"] = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar_one()
    engine.dispose()
    return counts


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_frozen_registry_upgrades_keeping_every_row_and_then_guards_its_values(db_url, revision):
    _restore(db_url, revision)
    before = _counts(db_url)
    assert before["revision"] == revision and before["tuning_record"] > 0
    refused = _cli("--db", db_url, "lookup", "--json")
    assert refused.exit_code != 0 and "registry db upgrade" in refused.output  # an old registry is not read as is

    upgraded = _cli("--db", db_url, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    after = _counts(db_url)
    assert after == {**before, "revision": HEAD}
    rows = json.loads(_cli("--db", db_url, "lookup", "--json").output)["rows"]
    assert len(rows) == after["best_record"]  # every workload's best record reads back
    if revision >= "0006":
        tokens = json.loads(_cli("--db", db_url, "token", "list", "--json").output)["rows"]
        assert [t["name"] for t in tokens] == ["frozen-reader"]

    engine = create_engine(db_url)
    try:
        for bad in ("UPDATE tuning_record SET source = 'transfer'", "UPDATE tuning_record SET trust = 'trusted'",
                    "INSERT INTO registry_info (id, registry_id) VALUES (2, 'another')"):  # fmt: skip
            with pytest.raises(IntegrityError), engine.begin() as conn:
                conn.execute(text(bad))
    finally:
        engine.dispose()
    assert _counts(db_url) == after


def test_an_upgrade_that_would_break_a_constraint_is_refused_and_changes_nothing(db_url):
    """A value outside the known words, written around the registry, stops the upgrade to 0008 before it alters
    anything: one line naming the rows and what to do."""
    _restore(db_url, "0007")
    engine = create_engine(db_url)
    with engine.begin() as conn:
        first = conn.execute(text("SELECT min(id) FROM tuning_record")).scalar_one()
        conn.execute(text("UPDATE tuning_record SET source = 'transfer' WHERE id = :id"), {"id": first})
    engine.dispose()
    before = _counts(db_url)

    result = _cli("--db", db_url, "db", "upgrade")
    assert result.exit_code != 0
    assert "1 row(s) of tuning_record break the new constraint source" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert _counts(db_url) == before  # still 0007, every row as it was
