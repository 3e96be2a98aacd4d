"""The schema revision this registry needs: constants shared by the migration code and the SQLAlchemy-free read path."""

from __future__ import annotations

# Alembic's version table, under the registry's own name, so that another Alembic user of the same database cannot
# clash.
VERSION_TABLE = "registry_alembic_version"
# The newest revision in migrations/versions/. tests/test_migrations.py fails when the two disagree.
HEAD = "0009"
