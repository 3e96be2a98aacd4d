"""Copying a registry's SQLite file for a benchmark: through SQLite's backup API, so that what still sits in the
write-ahead log (the -wal file of a database another connection has open) is in the copy too. A plain file copy
loses it."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def copy_sqlite(src: Path, dst: Path) -> None:
    dst.unlink(missing_ok=True)
    with sqlite3.connect(src) as source, sqlite3.connect(dst) as target:
        source.backup(target)
