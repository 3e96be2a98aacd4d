"""Alembic environment: runs on the engine the registry hands over, or on ``sqlalchemy.url`` from alembic.ini."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from registry.store.sql.engine import WRITE, create
from registry.store.sql.models import Base
from registry.store.sql.schema import VERSION_TABLE

config = context.config


def run_migrations_online() -> None:
    engine = config.attributes.get("engine") or create(config.get_main_option("sqlalchemy.url"))
    with engine.execution_options(**{WRITE: True}).connect() as connection:
        # SQLite changes a table by copying it and dropping the old one. With foreign keys on, that drop first
        # deletes every old row with its ON DELETE actions: best records would go, and each row's search for the
        # records naming it as their donor (not indexed) makes it quadratic. So they are off while migrating, set
        # on the connection itself (SQLite ignores the pragma inside a transaction).
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            connection.connection.dbapi_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            _migrate(connection)
        finally:
            if sqlite:
                connection.connection.dbapi_connection.execute("PRAGMA foreign_keys=ON")


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
