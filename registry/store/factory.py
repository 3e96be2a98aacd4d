"""The one way into a registry's data from outside ``registry/store/sql``: the storage by URL (``open_storage``), the
plain DB-API reads of ``registry lookup`` (``open_lookup``), and the checks on an SQLite file made before opening it.

Only this module imports the SQL implementation (``tests/test_storage_interface.py`` holds every other module to it).
It imports neither SQLAlchemy nor TVM at import: ``registry lookup`` and ``--device`` completion run through it on a
plain DB-API connection, and ``Store`` (SQLAlchemy) is imported only when a storage is opened.
"""

from __future__ import annotations

from registry.config import resolve_database_url
from registry.errors import DatabaseError
from registry.store.interface import RegistryStorage
from registry.store.sql import lookup as direct
from registry.store.sql.sqlite_file import file_of, not_writable, read_only_uri
from registry.store.trust import DEFAULT_TRUST
from registry.store.urls import redact
from registry.store.values import DeviceRow, LookupFilter, LookupRow

__all__ = ["LookupReads", "file_of", "not_writable", "open_lookup", "open_storage", "read_only_uri", "store_class"]

# The URL schemes (before any "+driver") of the databases the SQL implementation keeps a registry in.
SQL_SCHEMES = ("sqlite", "postgresql")


def store_class() -> type:
    """The SQL implementation's class, ``Store`` (``registry.Store``); importing it imports SQLAlchemy."""
    from registry.store.sql.store import Store

    return Store


def open_storage(
    url: str | None = None, *, check_schema: bool = True, create_new: bool = True, trust: str = DEFAULT_TRUST
) -> RegistryStorage:
    """The storage at ``url`` (default: ``$REGISTRY_DATABASE_URL``, else the per-user SQLite file; a plain path is an
    SQLite file), by its scheme. Raises DatabaseError, in one line, for a scheme no implementation speaks.

    ``check_schema``, ``create_new`` and ``trust`` as ``Store`` takes them.
    """
    resolved = resolve_database_url(url)
    scheme = resolved.split(":", 1)[0].split("+", 1)[0].lower()
    if "://" in resolved and scheme not in SQL_SCHEMES:
        raise DatabaseError(
            f"cannot use database {redact(resolved)}: the registry keeps its data in SQLite (sqlite:///FILE) or "
            f"PostgreSQL (postgresql://...), not {scheme}"
        )
    return store_class()(resolved, check_schema=check_schema, create_new=create_new, trust=trust)


class LookupReads:
    """The reads of ``registry lookup`` over a plain DB-API connection, without SQLAlchemy: the same SQL that
    ``RegistryStorage.lookup`` and ``resolve_devices`` run, answered the same way. Close it when done (``with``): an
    open read transaction holds PostgreSQL locks for as long as the process lives."""

    def __init__(self, sql: direct.Sql) -> None:
        self._sql = sql

    def lookup(self, f: LookupFilter) -> list[LookupRow]:
        """As ``RegistryStorage.lookup``."""
        return direct.lookup(self._sql, f)

    def resolve_devices(self, selector: str) -> list[DeviceRow]:
        """As ``RegistryStorage.resolve_devices``."""
        return direct.resolve_devices(self._sql, selector)

    def all_devices(self) -> list[DeviceRow]:
        """Every device of the registry, by id."""
        return direct.all_devices(self._sql)

    def close(self) -> None:
        self._sql.conn.close()

    def __enter__(self) -> LookupReads:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def open_lookup(url: str) -> LookupReads | None:
    """The lookup reads of an existing SQLite file or PostgreSQL database at the current schema, over a plain DB-API
    connection; None otherwise (a missing or fresh database, an older schema, another dialect): then open the
    storage, which migrates a fresh database or explains what is wrong."""
    sql = direct.connect(url)
    return None if sql is None else LookupReads(sql)
