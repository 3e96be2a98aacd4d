"""The storage protocol (``interface.RegistryStorage``: one method per question, plain values back, ``values`` and
``rows``), what a row must be by itself (``validation``, ``decode``) and its embedding (``embedding``), which the store
checks and computes; its SQL implementation is ``sql/`` (``sql.store.Store`` over SQLite or PostgreSQL, the tables in
``sql/models.py``), the schema's history ``migrations/``.

Imports no other layer (only the base helpers). No TVM here.
"""
