"""Alembic environment: runs on the engine the registry hands over, or on ``sqlalchemy.url`` from alembic.ini."""

from __future__ import annotations

from alembic import context

from registry.store.engine import WRITE, create
from registry.store.models import Base
from registry.store.schema import VERSION_TABLE

config = context.config


def run_migrations_online() -> None:
    engine = config.attributes.get("engine") or create(config.get_main_option("sqlalchemy.url"))
    with engine.execution_options(**{WRITE: True}).connect() as connection:
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
