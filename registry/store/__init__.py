"""The storage protocol (``interface.RegistryStorage``: one method per question, plain values back) and its SQL
implementation (``store.Store`` over SQLite or PostgreSQL); the schema (``models``, ``migrations/``), and the
soundness of a row by itself (``validation``) and its embedding (``embedding``), which the store checks and computes.

Imports no other layer (only the base helpers). No TVM here.
"""
