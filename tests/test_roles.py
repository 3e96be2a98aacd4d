"""Read-only and writer roles on a shared PostgreSQL registry (issue 12): `registry db grant`, the reads a read-only
role may run, and every write it may not, each refused in one line with the database left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from registry import testing
from registry.cli.main import cli
from registry.errors import AccessDeniedError, BadInputError
from registry.store.sql import roles
from registry.store.sql.revision import HEAD, VERSION_TABLE
from registry.store.sql.store import Store
from registry.store.values import PredictorIn
from registry.tvm_side import tvmlog
from tests.pg_roles import empty, granted_roles, require_postgresql
from tests.rows import rows_of

H100_LOG = Path(__file__).resolve().parents[2] / "shared" / "data" / "ms_bert_src_cuda_h100"
H100 = "NVIDIA H100 80GB HBM3"


def run(url: str, *args: str):
    return CliRunner().invoke(cli, ["--db", url, *args])


def refused(result, fragment: str) -> str:
    """The standard for a refusal: exit 1, one line on stderr naming the problem, no traceback."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def shared(request):
    """The run's PostgreSQL scratch database holding a small registry owned by the admin role, a read-only role and a
    writer role granted on it (names unique to this run, dropped after); skips when PostgreSQL is unset or down."""
    require_postgresql()
    owner_url = request.getfixturevalue("pg_server_url")
    empty(owner_url)
    store = Store(owner_url)
    dev = testing.device()
    store.ingest([testing.workload(i) for i in range(3)], [testing.record(i, j, dev) for i in range(3) for j in (0, 1)])
    store.close()
    with granted_roles(owner_url) as roles:
        yield roles


def _privilege(owner_url: str, role: str, table: str, right: str) -> bool:
    engine = create_engine(owner_url)
    with engine.connect() as conn:
        allowed = conn.execute(text("SELECT has_table_privilege(:r, :t, :p)"), {"r": role, "t": table, "p": right})
        value = allowed.scalar()
    engine.dispose()
    return value


def _small_log(tmp_path: Path) -> Path:
    """Two records of the shared H100 log: enough for an import, replayed in a second."""
    if not H100_LOG.exists():
        pytest.skip(f"{H100_LOG} (the shared CUDA log) is not here")
    folder = tmp_path / "log"
    folder.mkdir()
    (folder / tvmlog.WORKLOAD_FILE).write_text((H100_LOG / tvmlog.WORKLOAD_FILE).read_text())
    lines = (H100_LOG / tvmlog.RECORD_FILE).read_text().splitlines()
    (folder / tvmlog.RECORD_FILE).write_text("".join(line + "\n" for line in lines[:2]))
    return folder


# -- reads --------------------------------------------------------------------------------------------------------


def test_a_read_only_role_reads_and_creates_nothing(shared, tmp_path):
    before = rows_of(shared["owner"])
    for args in (["lookup"], ["lookup", "--json"], ["stats"], ["devices"], ["export", "-o", str(tmp_path / "out")]):
        result = run(shared["reader"], *args)
        assert result.exit_code == 0 and result.stderr == "", (args, result.output)
    assert "records    6" in run(shared["reader"], "stats").stdout
    assert (tmp_path / "out" / tvmlog.RECORD_FILE).exists()
    assert rows_of(shared["owner"]) == before


def test_a_read_only_role_on_an_outdated_schema_is_told_to_upgrade(shared):
    engine = create_engine(shared["owner"])
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '0001'"))
    try:
        refused(run(shared["reader"], "stats"), "run `registry db upgrade`")
        refused(run(shared["reader"], "db", "upgrade"), "may not change the registry's schema")
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = :h"), {"h": HEAD})
        engine.dispose()


# -- writes -------------------------------------------------------------------------------------------------------


@pytest.mark.tvm
def test_every_write_of_a_read_only_role_is_one_line_and_changes_nothing(shared, tmp_path):
    reader, writer = shared["names"]
    before = rows_of(shared["owner"])
    line = refused(run(shared["reader"], "import", str(_small_log(tmp_path)), "--host-model", H100), "refused a write")
    assert f"role '{reader}' has no right to write to table" in line and "docs/SHARING.md" in line
    refused(run(shared["reader"], "db", "upgrade"), f"its owner {make_url(shared['owner']).username!r} runs")
    refused(run(shared["reader"], "db", "grant", writer, "--read-only"), "does not own the registry's tables")
    store = Store(shared["reader"])
    try:  # a predictor: TVM-free, and a SELECT ... FOR UPDATE before its INSERT
        with pytest.raises(AccessDeniedError, match="refused a write"):
            store.save_predictor(PredictorIn(1, "xgb", b"blob", {}, 1, 1, "0.27.0"))
    finally:
        store.close()
    assert rows_of(shared["owner"]) == before


@pytest.mark.tvm
def test_a_writer_imports_but_does_not_change_the_schema(shared, tmp_path):
    done = run(shared["writer"], "import", str(_small_log(tmp_path)), "--host-model", H100, "--json")
    assert done.exit_code == 0, done.output
    assert '"records_new": 2' in done.stdout
    before = rows_of(shared["owner"])
    refused(run(shared["writer"], "db", "upgrade"), "may not change the registry's schema")
    engine = create_engine(shared["writer"])
    with pytest.raises(Exception, match="permission denied for schema public"), engine.begin() as conn:
        conn.execute(text("CREATE TABLE sneaky (id int)"))
    engine.dispose()
    assert rows_of(shared["owner"]) == before


def test_tables_of_later_migrations_follow_the_grants(shared):
    reader, writer = shared["names"]
    engine = create_engine(shared["owner"])
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE later_migration (id serial PRIMARY KEY)"))
    try:
        assert _privilege(shared["owner"], reader, "later_migration", "SELECT")
        assert not _privilege(shared["owner"], reader, "later_migration", "INSERT")
        assert _privilege(shared["owner"], writer, "later_migration", "INSERT")
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE later_migration"))
        engine.dispose()


def test_a_grant_is_the_roles_whole_access(shared):
    """A writer granted --read-only loses its write rights (a grant is not an addition), and gets them back."""
    _, writer = shared["names"]
    assert run(shared["owner"], "db", "grant", writer, "--read-only").exit_code == 0
    assert not _privilege(shared["owner"], writer, "tuning_record", "INSERT")
    assert _privilege(shared["owner"], writer, "tuning_record", "SELECT")
    assert run(shared["owner"], "db", "grant", writer, "--writer").exit_code == 0
    assert _privilege(shared["owner"], writer, "tuning_record", "INSERT")


def test_grant_refuses_in_one_line(shared):
    owner = make_url(shared["owner"]).username
    refused(run(shared["owner"], "db", "grant", "no_such_role_here", "--writer"), "does not exist; create it first")
    refused(run(shared["owner"], "db", "grant", owner, "--writer"), "superuser")
    refused(run(shared["owner"], "db", "grant", 'x"; DROP TABLE device; --', "--writer"), "is not a role name")
    refused(run(shared["owner"], "db", "grant", "pg_monitor", "--read-only"), "PostgreSQL's own role")


# -- without PostgreSQL -------------------------------------------------------------------------------------------


def test_grant_on_sqlite_is_refused(sqlite_url):
    refused(run(sqlite_url, "db", "grant", "reader", "--read-only"), "an SQLite registry has no roles")


def test_grant_needs_exactly_one_kind(sqlite_url):
    for flags in ([], ["--read-only", "--writer"]):
        result = run(sqlite_url, "db", "grant", "reader", *flags)
        assert result.exit_code == 2 and "give one of --read-only and --writer" in result.stderr


def test_print_sql_connects_to_nothing_and_quotes_the_role():
    result = run("postgresql://owner@127.0.0.1:1/team", "db", "grant", "Team-A", "--read-only", "--print-sql")
    assert result.exit_code == 0, result.output
    sql = result.stdout
    assert sql.splitlines()[1] == "BEGIN;" and sql.splitlines()[-1] == "COMMIT;"
    assert 'GRANT CONNECT ON DATABASE "team" TO "Team-A";' in sql
    assert 'GRANT SELECT ON ALL TABLES IN SCHEMA "public" TO "Team-A";' in sql
    assert "INSERT" not in sql and "CREATE" not in sql
    refused(run("postgresql://owner@127.0.0.1:1", "db", "grant", "r", "--writer", "--print-sql"), "names no database")


def test_the_writer_statements_grant_writes_and_no_ddl():
    sql = "\n".join(roles.statements("ci", roles.WRITER, roles.Place("team", "public", "owner")))
    assert 'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "public" TO "ci"' in sql
    assert 'ALTER DEFAULT PRIVILEGES FOR ROLE "owner" IN SCHEMA "public" GRANT USAGE, SELECT ON SEQUENCES' in sql
    assert "CREATE" not in sql and "TRUNCATE" not in sql and "ALL PRIVILEGES" not in sql
    with pytest.raises(BadInputError):
        roles.check_name("a" * 64)
