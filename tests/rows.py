"""A database's content as rows, to assert that a refused command left it as it was.

Rows, not file bytes: a WAL checkpoint rewrites an SQLite file without changing its content. Read through a plain
read-only connection (not the registry's, which would switch a foreign SQLite file to WAL mode). A file that SQLite
cannot read is compared by its bytes; for any SQLite path that is not a registry, the names of the files beside it
count too (nothing may appear there either; a live registry has its -wal and -shm files while it is open).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from registry.store.sql.revision import VERSION_TABLE


def rows_of(url: str) -> dict[str, Any]:
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    snapshot: dict[str, Any] = {}
    path = Path(parsed.database or "")
    if parsed.get_backend_name() == "sqlite" and not path.is_file():
        engine = None
    elif parsed.get_backend_name() == "sqlite":
        engine = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    else:
        engine = create_engine(parsed)
    try:
        if engine is not None:
            with engine.connect() as conn:
                for table in sorted(inspect(conn).get_table_names()):
                    rows = conn.execute(text(f'SELECT * FROM "{table}"')).all()
                    snapshot[table] = sorted((tuple(r) for r in rows), key=repr)
    except SQLAlchemyError:
        snapshot["unreadable file"] = hashlib.sha256(path.read_bytes()).hexdigest()
    finally:
        if engine is not None:
            engine.dispose()
    if parsed.get_backend_name() == "sqlite" and VERSION_TABLE not in snapshot:
        snapshot["files beside it"] = sorted(p.name for p in path.parent.iterdir()) if path.parent.exists() else []
    return snapshot
