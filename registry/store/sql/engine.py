"""Engines for any SQLAlchemy URL, tuned per dialect, and the one place that maps driver errors to ours."""

from __future__ import annotations

import contextlib
import getpass
import os
import random
import re
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from registry.errors import ACCESS_HINT, AccessDeniedError, DatabaseError, RegistryWarning
from registry.store.sql import sqlite_file
from registry.store.urls import redact

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
# Execution option that marks a connection as a writer. On SQLite a writer starts with BEGIN IMMEDIATE, so it queues on
# the busy timeout instead of failing with "database is locked" when it upgrades a read lock mid-transaction.
WRITE = "registry_write"


POOL_SIZE = 10
IDLE_PING_S = 10.0


def create(url: str) -> Engine:
    """An engine for ``url``. Raises DatabaseError for a URL that is malformed or names a missing driver."""
    try:
        parsed = make_url(url)
    except ArgumentError as e:
        raise DatabaseError(f"not a database URL: {url!r}") from e
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        # psycopg 3 is the driver the package depends on; SQLAlchemy would otherwise look for psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        if parsed.get_backend_name() == "sqlite":
            return _sqlite_engine(parsed)
        # pool_size: connections kept open. A connection beyond it is opened and closed per use (a PostgreSQL backend
        # started each time): a server's threads (registry serve: 8 per worker) must all find a kept one.
        engine = create_engine(parsed, pool_size=POOL_SIZE, max_overflow=POOL_SIZE)
        _ping_when_idle(engine)
        return engine
    except (ArgumentError, ImportError, SQLAlchemyError) as e:
        raise DatabaseError(f"cannot use database {redact(url)}: {e}") from e


def _ping_when_idle(engine: Engine) -> None:
    """Check a pooled connection before use only when it has been idle for ``IDLE_PING_S``: one that was just used is
    alive, and a ping on every checkout (``pool_pre_ping``) would be a third of a served lookup's round trips. One idle
    longer may have been closed by a database restart or a firewall: it is pinged, and replaced if dead."""

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn, record, _proxy):
        if time.monotonic() - record.info.get("returned", 0.0) < IDLE_PING_S:
            return
        try:
            cur = dbapi_conn.cursor()
            cur.execute("SELECT 1")
            cur.close()
            dbapi_conn.rollback()
        except Exception as e:  # noqa: BLE001 - any driver error: the pool opens a new connection
            raise DisconnectionError() from e

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _fresh(_dbapi_conn, record):
        record.info["returned"] = time.monotonic()


def _sqlite_engine(url) -> Engine:
    memory = url.database in (None, "", ":memory:")
    read_only, path = None, None
    if not memory:
        path = Path(url.database).expanduser()
        refused = sqlite_file.problem(path)  # before the first connection turns the file to WAL mode
        if refused:
            raise DatabaseError(refused)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DatabaseError(f"cannot create the registry {path}: {e.strerror or e} ({path.parent})") from None
        read_only = sqlite_file.read_only_uri(path)
        if read_only is not None:  # the reading commands work; a write is refused in one line (translated_errors)
            url = url.set(database=read_only, query={**url.query, "uri": "true"})
    engine = create_engine(
        url,
        # An in-memory database lives only as long as its one connection, which an import's write-behind thread
        # (store/write_behind.py) uses too, one statement at a time.
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, **({"check_same_thread": False} if memory else {})},
        **({"poolclass": StaticPool} if memory else {}),
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        # Take transaction control from the sqlite3 module, which would not BEGIN before DDL or before a SELECT.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if not memory and read_only is None:
            _use_wal(cur)  # readers never block the writer, nor it them
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL mode; fsync at checkpoints
        cur.execute("PRAGMA cache_size=-65536")  # 64 MiB instead of 2 MiB: the indexes of a large registry stay hot
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection):
        if conn.get_execution_options().get(WRITE) and path is not None:
            _begin_writing(conn.connection.dbapi_connection, path)
        else:
            conn.exec_driver_sql("BEGIN")

    return engine


def _use_wal(cur) -> None:
    """Turn the database to WAL mode. On a fresh file, processes opening it at once race to convert it, and SQLite
    answers the loser "database is locked" at once, without its busy handler (two shared locks each waiting to become
    exclusive would deadlock), so the loser tries again until the busy timeout."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.005, 0.05))


# How long a writer waits quietly for another writer's lock before it says so.
SQLITE_QUIET_WAIT_MS = 1_000
_said_waiting: set[Path] = set()


def _begin_writing(raw, path: Path) -> None:
    """BEGIN IMMEDIATE on an SQLite registry: take the writer's lock, waiting for another writer's for up to
    SQLITE_BUSY_TIMEOUT_MS. A wait longer than a second is said once (and for which processes, where /proc shows
    them); one that runs out is one error line, not a silent hang or a retry loop."""
    raw.execute(f"PRAGMA busy_timeout={SQLITE_QUIET_WAIT_MS}")
    try:
        try:
            raw.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e):
                raise
        wait_s = (SQLITE_BUSY_TIMEOUT_MS - SQLITE_QUIET_WAIT_MS) / 1000
        if path not in _said_waiting:
            _said_waiting.add(path)
            warnings.warn(
                RegistryWarning(f"{path} is locked by another writer{_holders(path)}: waiting up to {wait_s:g} s"),
                stacklevel=2,
            )
        raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS - SQLITE_QUIET_WAIT_MS}")
        try:
            raw.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if "locked" not in str(e):
                raise
            raise DatabaseError(
                f"{path} is still locked by another writer{_holders(path)} after {SQLITE_BUSY_TIMEOUT_MS / 1000:g} s: "
                "try again when it has finished"
            ) from None
    finally:
        raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")


def _holders(path: Path) -> str:
    """ " (process 123: registry import ...)" for the other processes that have ``path`` open, as far as /proc shows
    them (Linux; processes of other users are not shown to an ordinary user); "" where none is seen."""
    wanted = {str(path.resolve()), f"{path.resolve()}-wal"}
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        if proc.name == str(os.getpid()):
            continue
        try:
            if any(os.readlink(fd) in wanted for fd in (proc / "fd").iterdir()):
                command = " ".join((proc / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ").split())
                found.append(f"process {proc.name}: {command[:60]}")
        except OSError:
            continue
    return f" ({'; '.join(found[:3])})" if found else ""


def _transient(e: DBAPIError) -> bool:
    """Lock waits that ran out, deadlocks and serialization failures: worth a retry, unlike every other error."""
    text = str(e.orig).lower()
    code = getattr(e.orig, "sqlstate", None) or getattr(e.orig, "pgcode", None)
    return "database is locked" in text or "database is busy" in text or code in ("40001", "40P01", "55P03")


def with_retries(fn: Callable[[], T], *, attempts: int = 8) -> T:
    """Run a whole transaction ``fn`` again, with jittered back-off, when it lost a lock race."""
    for attempt in range(attempts):
        try:
            return fn()
        except DBAPIError as e:
            if not _transient(e) or attempt == attempts - 1:
                raise
            time.sleep(random.uniform(0, 0.05 * 2**attempt))
    raise AssertionError("unreachable")


# PostgreSQL's insufficient_privilege: a role without the right for a table, a schema, or a DDL statement.
_NO_RIGHT = "42501"


@contextlib.contextmanager
def translated_errors(url: str, *, writing: bool = False) -> Iterator[None]:
    """Turn driver failures into one readable DatabaseError line. ``writing``: the block is a write transaction (a
    refusal of rights then says so: the usual cause is a read-only role)."""
    try:
        yield
    except DBAPIError as e:
        reason = str(e.orig).strip().splitlines()[0] if e.orig else str(e)
        if getattr(e.orig, "sqlstate", None) == _NO_RIGHT:
            raise AccessDeniedError(refusal(url, reason, writing=writing)) from e
        if "readonly database" in reason or (reason == "unable to open database file" and url.startswith("sqlite")):
            raise DatabaseError(sqlite_file.not_writable(sqlite_file.file_of(url) or redact(url))) from e
        if isinstance(e, OperationalError):
            if reason.endswith("does not exist") and "database" in reason:  # the server says: no such database
                reason += " (the registry creates its tables, not the database: `createdb` makes one)"
            raise DatabaseError(f"cannot use database {redact(url)}: {reason}") from e
        raise DatabaseError(f"database error on {redact(url)}: {reason}") from e


def refusal(url: str, reason: str, *, writing: bool) -> str:
    """One line for a refusal of rights: which role, what it may not do, and who can change that.

    PostgreSQL names the object ("permission denied for table tuning_record") but not the right, nor the role: the
    role is the URL's user, else libpq's default (PGUSER, else the login name).
    """
    role = make_url(url).username or os.environ.get("PGUSER") or getpass.getuser()
    found = re.match(r"permission denied for (.+)", reason)
    what = f"has no right to {'write to' if writing else 'use'} {found.group(1)}" if found else f"may not: {reason}"
    kind = "a write" if writing else "this"
    hint = f"a read-only role? {ACCESS_HINT}" if writing else ACCESS_HINT
    return f"the database refused {kind}: role {role!r} {what} ({hint})"
