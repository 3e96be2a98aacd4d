"""Schema revision checks and migrations.

The fast path (every command) is one SELECT against the version table and a comparison with ``HEAD``; Alembic is only
imported to migrate. A fresh database is migrated automatically, under a lock, so that several processes starting at
once do not race. A database at an older revision is refused: a shared registry is never migrated behind its users'
backs.
"""

from __future__ import annotations

import contextlib
import fcntl
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Connection, Engine, inspect, text

from registry.errors import NO_REGISTRY_HINT, AccessDeniedError, DatabaseError, NoRegistryError, SchemaOutdatedError
from registry.store.sql.revision import HEAD, VERSION_TABLE

# Arbitrary 64-bit key for pg_advisory_lock, shared by every registry process that migrates.
_PG_LOCK_KEY = 0x7265_6769_7374_7279


_FOREIGN = "this database already holds tables that are not a registry's; point --db at an empty database"


def current_revision(conn: Connection) -> str | None:
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def ensure_current(engine: Engine, *, create: bool = True) -> bool:
    """Make sure ``engine``'s database is at HEAD: migrate it if it is empty (or, without ``create``, refuse it with
    NoRegistryError: a read-only command sets nothing up), refuse it otherwise. True when this call created the
    registry's tables."""
    with engine.connect() as conn:
        revision = current_revision(conn)
    if revision is None and not create:
        raise NoRegistryError(
            f"{engine.url.render_as_string(hide_password=True)} holds no registry yet; {NO_REGISTRY_HINT}"
        )
    if revision != HEAD and create:
        # Under the lock: another process may have migrated it while this one waited, and a fresh database that
        # another process is migrating shows its revisions one by one (SQLite commits each schema change), so an
        # older revision seen without the lock may be a migration in progress, not an outdated registry.
        with _migration_lock(engine):
            revision = _revision_of_ours(engine)
            if revision is None:
                from registry.store.sql.migrate import run_upgrade

                run_upgrade(engine)
                return True
    if revision != HEAD:
        _refuse(revision)
    return False


def drop_if_unused(engine: Engine) -> bool:
    """Drop the registry's tables when they hold no workload, device or model (a registry created for a write that
    was refused); True when they were dropped. One transaction: PostgreSQL's DDL is transactional, so a registry
    that another process writes into meanwhile keeps its tables (the counts are taken under the tables' locks)."""
    from registry.store.sql.models import Base

    with engine.begin() as conn:
        tables = [t for t in Base.metadata.sorted_tables if inspect(conn).has_table(t.name)]
        if engine.dialect.name == "postgresql" and tables:
            conn.execute(text(f"LOCK TABLE {', '.join(t.name for t in tables)} IN ACCESS EXCLUSIVE MODE"))
        for name in ("tuning_record", "workload", "device", "model"):
            if any(t.name == name for t in tables) and conn.execute(text(f"SELECT 1 FROM {name} LIMIT 1")).first():
                return False
        for table in reversed(tables):
            table.drop(conn)
        conn.execute(text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))
    return True


def _revision_of_ours(engine: Engine) -> str | None:
    """The revision; refuses a database without one that holds another application's tables."""
    with engine.connect() as conn:
        revision = current_revision(conn)
        if revision is None and inspect(conn).get_table_names():
            raise DatabaseError(_FOREIGN)
    return revision


def _refuse(revision: str) -> None:
    from registry.store.sql.migrate import known_revisions  # Alembic, only on this rare path

    if revision in known_revisions():
        raise SchemaOutdatedError(
            f"the database is at schema revision {revision} and this registry needs {HEAD}: "
            "run `registry db upgrade` (back the database up first if it is shared)"
        )
    raise SchemaOutdatedError(
        f"the database is at schema revision {revision}, which this registry does not know: "
        "it was written by a newer registry; upgrade tvm-registry"
    )


def upgrade(engine: Engine) -> tuple[str | None, str | None]:
    """Migrate to HEAD; returns the revisions before and after. Refuses a database of a newer registry, or one that
    holds tables of something else."""
    from registry.store.sql.migrate import known_revisions, run_upgrade

    with _migration_lock(engine):
        before = _revision_of_ours(engine)
        if before is not None and before not in known_revisions():
            _refuse(before)
        _refuse_a_non_owner(engine)
        run_upgrade(engine)
        with engine.connect() as conn:
            return before, current_revision(conn)


def _refuse_a_non_owner(engine: Engine) -> None:
    """Only the owner of a PostgreSQL registry's tables may change them: a read-only or writer role is refused here,
    before Alembic starts (even when there is nothing to migrate: such a role never upgrades)."""
    if engine.dialect.name != "postgresql":
        return
    from registry.store.sql import roles

    with engine.connect() as conn:
        owner = roles.may_migrate(conn)
        if owner is not None:
            raise AccessDeniedError(
                f"role {roles.current_role(conn)!r} may not change the registry's schema: its owner {owner!r} runs "
                "`registry db upgrade`"
            )


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """Serialize migrations between processes: a file lock beside an SQLite file, an advisory lock on PostgreSQL."""
    url = engine.url
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:"):
            yield
            return
        # a file that this process cannot write is opened as a read-only URI, "file:PATH?mode=ro"
        database = url.database
        if url.query.get("uri"):
            database = urllib.parse.unquote(database.removeprefix("file:").split("?", 1)[0])
        lock_path = Path(database).expanduser().with_suffix(".migrate.lock")
        try:
            f = open(lock_path, "a")  # noqa: SIM115 - closed below, once the lock is let go
        except OSError as e:  # a read-only folder: nothing can be migrated there
            raise DatabaseError(f"cannot take the migration lock {lock_path}: {e.strerror or e}") from None
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
    elif url.get_backend_name() == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
                conn.commit()
    else:
        yield
