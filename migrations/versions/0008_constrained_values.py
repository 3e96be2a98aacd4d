"""Constrained values: a record's source and trust are one of their known words, and registry_info holds one row

The registry writes these columns only through its storage layer, which validates them, but the schema did not say
so: a row written by hand or by another tool with a source of "transfer" or a trust of "trusted" was stored, and
then read as a record no code path expected. ``registry_info`` (the registry's identity, the origin stamped on what it
measures) is one row by design; now the database keeps it so. A registry holding a value outside these sets is
refused before anything changes, naming what to fix.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27 14:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from registry.errors import DatabaseError

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# Copies of registry.store.sql.models' SOURCES and registry.store.trust's TRUST_LEVELS as they are at this revision:
# a migration describes one step of the schema, and must not change when the models do.
SOURCES = ("tuned", "transferred", "imported")
TRUST_LEVELS = ("measured", "imported", "verified", "disputed")


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


CHECKS = [  # (table, constraint name, condition)
    ("tuning_record", "source", _one_of("source", SOURCES)),
    ("tuning_record", "trust", _one_of("trust", TRUST_LEVELS)),
    ("registry_info", "single_row", "id = 1"),
]


def upgrade() -> None:
    bind = op.get_bind()
    for table, name, condition in CHECKS:
        breaking = bind.execute(sa.text(f"SELECT count(*) FROM {table} WHERE NOT ({condition})")).scalar_one()
        if breaking:
            raise DatabaseError(
                f"cannot upgrade: {breaking} row(s) of {table} break the new constraint {name} ({condition}); "
                "correct or delete them, then run `registry db upgrade` again"
            )
    for table in ("tuning_record", "registry_info"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for of, name, condition in CHECKS:
                if of == table:
                    batch_op.create_check_constraint(name, condition)


def downgrade() -> None:
    for table in ("tuning_record", "registry_info"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for of, name, _ in CHECKS:
                if of == table:
                    batch_op.drop_constraint(op.f(f"ck_{table}_{name}"), type_="check")
