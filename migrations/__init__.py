"""Alembic revisions of the registry's schema (shipped inside the package as ``registry.store.migrations``)."""
