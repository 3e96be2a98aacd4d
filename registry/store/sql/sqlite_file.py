"""Is an existing SQLite file a registry? Asked before the registry opens it for writing.

Opening a file the registry's way changes it: every connection switches it to WAL mode (rewriting its header and
leaving ``-wal`` and ``-shm`` files beside it while open), and a database without the registry's version table is
migrated under a lock file beside it. So another program's database, or a file that is no database at all, is
refused first, by reading it without SQLite writing anything: its header, then its table names through an
``immutable`` read-only connection (which takes no lock and creates no side file). Needs neither SQLAlchemy nor TVM:
the fast lookup path asks it too.
"""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from pathlib import Path

from registry.store.sql.revision import VERSION_TABLE

_HEADER = b"SQLite format 3\x00"


def file_of(url: str) -> Path | None:
    """The file an SQLite URL names; None for another database, or SQLite in memory."""
    if not url.startswith("sqlite:"):
        return None
    rest = url.split("?", 1)[0][len("sqlite:") :]
    if not rest.startswith("///") or rest[3:] in ("", ":memory:"):
        return None
    return Path(rest[3:]).expanduser()


def read_only_uri(path: Path) -> str | None:
    """An SQLite URI that opens the existing file ``path`` for reading only, where this process cannot write it (a
    read-only filesystem, or no permission on the file or its folder); None where it can. Where its folder cannot be
    written either, SQLite could not create the shared-memory file a WAL database is read through, so the file is
    opened ``immutable`` when no write-ahead log with frames lies beside it: on a read-only filesystem nothing can
    change it, and elsewhere no writer has it open (a writer keeps a ``-wal`` file). A write through either is
    refused by SQLite ("readonly database")."""
    folder = path.parent if str(path.parent) else Path(".")
    if not path.is_file() or (os.access(path, os.W_OK) and os.access(folder, os.W_OK)):
        return None
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    wal = Path(f"{path}-wal")
    if not os.access(folder, os.W_OK) and (not wal.exists() or wal.stat().st_size == 0):
        uri += "&immutable=1"
    return uri


def not_writable(path: Path | str) -> str:
    """The one line for a write to a registry file that ``read_only_uri`` opened for reading only."""
    return (
        f"cannot write the registry {path}: it is read-only here (a read-only filesystem, or no permission to write "
        "the file or its folder); reading commands still work"
    )


def missing(url: str) -> str | None:
    """Why a read-only command finds no registry at ``url`` without creating anything, or None. Only SQLite URLs are
    judged here (a missing or empty file, a missing folder); a server database is judged by its tables."""
    from registry.errors import NO_REGISTRY_HINT

    path = file_of(url)
    if path is None:
        return None
    if path.is_dir():
        return None  # problem() names it
    if not path.parent.is_dir():
        return f"no registry at {path}: folder {path.parent} does not exist; {NO_REGISTRY_HINT}"
    if not path.exists():
        return f"no registry at {path}: the file does not exist; {NO_REGISTRY_HINT}"
    if path.stat().st_size == 0:
        return f"no registry at {path}: the file is empty; {NO_REGISTRY_HINT}"
    return None


def problem(path: Path) -> str | None:
    """Why ``path`` must not be opened as a registry, or None: it does not exist yet, is empty, or is a registry (of
    any revision: the schema check says more about those)."""
    if path.is_dir():
        return f"{path} is a directory, not a database file"
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        with open(path, "rb") as f:
            header = f.read(len(_HEADER))
    except OSError as e:
        return f"cannot read {path} ({e.strerror})"
    if header != _HEADER:
        return f"{path} is not an SQLite database; the registry leaves it untouched"
    tables = _tables(path)
    if tables is None:  # read twice: a checkpoint by a live registry can be caught mid-page, once
        time.sleep(0.1)
        tables = _tables(path)
    if tables is None:
        return f"{path} is not a readable SQLite database (corrupt or truncated); the registry leaves it untouched"
    if tables and VERSION_TABLE not in tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        return (
            f"{path} is another program's SQLite database (tables {shown}), not a registry; the registry leaves it "
            "untouched: point --db at a registry or a new file"
        )
    return None


def _tables(path: Path) -> set[str] | None:
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error:
        return None
