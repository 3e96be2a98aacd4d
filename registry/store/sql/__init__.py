"""The SQL implementation of the storage protocol: ``store.Store`` over SQLite or PostgreSQL through SQLAlchemy, its
tables (``models``), queries, transactional ingest, schema checks and engines, the exchange behind bundles and sync,
and the plain-SQL path of ``registry lookup``.

Nothing outside ``registry/store/`` imports its models, queries or ingest (tests/test_storage_interface.py).
"""
