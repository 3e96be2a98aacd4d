"""The SQL implementation of the storage protocol: ``store.Store`` over SQLite or PostgreSQL through SQLAlchemy, its
tables (``models``), queries, transactional ingest, schema checks and engines, the exchange behind bundles and sync,
and the plain-SQL path of ``registry lookup``.

Outside it, only ``registry.store.factory`` imports it (tests/test_storage_interface.py).
"""
