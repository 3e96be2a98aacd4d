"""The files a registry keeps on disk, and the one guard that keeps what a user writes off them.

An SQLite registry is its database file and the files SQLite and the registry keep beside it: the write-ahead log and
its shared-memory index (``-wal``, ``-shm``), a rollback journal (``-journal``), the migration lock, and the
similarity index with its manifest. A server database has only the index, in this user's data folder. A report, a
library, a bundle or a log written over any of them destroys the registry (an audit turned one into an HTML page), so
every command that writes a file asks ``refuse_own_file`` first. No TVM and no SQLAlchemy at import.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from registry.config import registry_home
from registry.errors import BadInputError
from registry.store.sql import sqlite_file

# Beside an SQLite file ``reg.db``: SQLite's own, named by appending to the file name.
SQLITE_SIDE_FILES = {"-wal": "write-ahead log", "-shm": "shared-memory index", "-journal": "rollback journal"}


def index_path(url: str) -> Path:
    """Where the similarity index of the registry at ``url`` is saved: beside an SQLite file, else in this user's
    data folder under a digest of the URL (without its password)."""
    path = sqlite_file.file_of(url)
    if path is not None:
        return path.with_suffix(".faiss")
    from registry.store.sql.engine import redact

    digest = hashlib.sha256(redact(url).encode()).hexdigest()[:16]
    return registry_home() / "index" / f"{digest}.faiss"


def own_files(url: str) -> dict[Path, str]:
    """Every file the registry at ``url`` keeps, existing or not yet, with what it is."""
    files: dict[Path, str] = {}
    path = sqlite_file.file_of(url)
    if path is not None:
        files[path] = "database file"
        files.update({Path(f"{path}{suffix}"): what for suffix, what in SQLITE_SIDE_FILES.items()})
        files[path.with_suffix(".migrate.lock")] = "migration lock"
    index = index_path(url)
    files[index] = "similarity index"
    files[index.with_suffix(".faiss.json")] = "similarity index's manifest"
    files[index.with_suffix(".faiss.tmp")] = "similarity index being written"
    return files


def _same(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return a.exists() and b.exists() and a.samefile(b)  # a hard link
    except OSError:
        return False


def refuse_own_file(path: Path | str, urls: list[str], option: str) -> None:
    """Raise BadInputError when ``path`` (given as ``option``) is one of the files of the registries at ``urls``."""
    path = Path(path).expanduser()
    for url in urls:
        for own, what in own_files(url).items():
            if _same(path, own):
                raise BadInputError(f"{option} {path} is the registry's own {what} ({own}): give another path")
