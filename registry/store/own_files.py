"""The files a registry keeps on disk, and the one guard that keeps what a user writes off them.

An SQLite registry is its database file and the files SQLite and the registry keep beside it: the write-ahead log and
its shared-memory index (``-wal``, ``-shm``), a rollback journal (``-journal``), the migration lock, and the
similarity index with its manifest. A server database has only the index, in this user's data folder. A report, a
library, a bundle or a log written over any of them destroys the registry (an audit turned one into an HTML page), so
every command that writes a file asks ``refuse_own_file`` first. A careless path can name another registry just as
well (``report -o other.db``), so the CLI also asks ``refuse_registry_file``: no output lands on any SQLite database
or on the files kept beside one. No TVM and no SQLAlchemy at import.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from registry.config import registry_home
from registry.errors import BadInputError
from registry.store.factory import file_of
from registry.store.urls import redact

# Beside an SQLite file ``reg.db``: SQLite's own, named by appending to the file name.
SQLITE_SIDE_FILES = {"-wal": "write-ahead log", "-shm": "shared-memory index", "-journal": "rollback journal"}
# Beside it too: the registry's own, named by replacing the file's suffix (``reg.db`` -> ``reg.faiss``).
REGISTRY_SIDE_FILES = {
    ".migrate.lock": "migration lock",
    ".faiss": "similarity index",
    ".faiss.json": "similarity index's manifest (an older version's)",
    ".faiss.tmp": "similarity index being written",
}
INDEX_FILES = (".faiss", ".faiss.json", ".faiss.tmp")  # and in this user's data folder, a server registry's index
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def index_path(url: str) -> Path:
    """Where the similarity index of the registry at ``url`` is saved: beside an SQLite file, else in this user's
    data folder under a digest of the URL (without its password)."""
    path = file_of(url)
    if path is not None:
        return path.with_suffix(".faiss")
    digest = hashlib.sha256(redact(url).encode()).hexdigest()[:16]
    return registry_home() / "index" / f"{digest}.faiss"


def own_files(url: str) -> dict[Path, str]:
    """Every file the registry at ``url`` keeps, existing or not yet, with what it is."""
    files: dict[Path, str] = {}
    path = file_of(url)
    if path is not None:
        files[path] = "database file"
        files.update({Path(f"{path}{suffix}"): what for suffix, what in SQLITE_SIDE_FILES.items()})
        files[path.with_suffix(".migrate.lock")] = "migration lock"
    index = index_path(url)
    files[index] = "similarity index"
    files[index.with_suffix(".faiss.json")] = "similarity index's manifest (an older version's)"
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


def is_sqlite_database(path: Path) -> bool:
    """Whether ``path`` is a regular file that starts with SQLite's header (a FIFO or a device is never opened: a read
    of one could block or consume data)."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:  # unreadable, or a name the OS refuses: not a database this check can see; the write will say
        return False


def _database_of_side_file(path: Path) -> tuple[Path, str] | None:
    """The SQLite database that ``path`` would be a side file of (its journal, its index...), with what it would be."""
    name = path.name
    for suffix, what in SQLITE_SIDE_FILES.items():
        base = path.with_name(name[: -len(suffix)]) if name.endswith(suffix) and name != suffix else None
        if base is not None and is_sqlite_database(base):
            return base, what
    for tail, what in REGISTRY_SIDE_FILES.items():
        stem = name[: -len(tail)] if name.endswith(tail) else ""
        base = _database_named(path.parent, stem) if stem else None
        if base is not None:
            return base, what
    return None


def _database_named(folder: Path, stem: str) -> Path | None:
    """An SQLite database in ``folder`` whose side files ``with_suffix`` names from ``stem``: STEM or STEM.EXT."""
    try:
        names = [e.name for e in os.scandir(folder if str(folder) else ".")]
    except OSError:
        return None
    for name in names:
        ext = name[len(stem) :]
        if name.startswith(stem) and (ext == "" or (ext[:1] == "." and len(ext) > 1 and "." not in ext[1:])):
            if is_sqlite_database(folder / name):
                return folder / name
    return None


def _in_index_folder(path: Path) -> bool:
    """Whether ``path`` names a similarity index in this user's data folder, where server registries keep theirs."""
    folder = registry_home() / "index"
    try:
        return path.parent.resolve() == folder.resolve() and path.name.endswith(INDEX_FILES)
    except OSError:
        return False


def refuse_side_file(path: Path | str, option: str) -> None:
    """Raise BadInputError when ``path`` is a file SQLite or the registry keeps beside an SQLite database (its
    journal, its similarity index, ...): a registry created there is deleted or overwritten with the database's."""
    path = Path(path).expanduser()
    beside = _database_of_side_file(path)
    if beside is not None:
        raise BadInputError(f"{option} {path} is the {beside[1]} of the SQLite database {beside[0]}: give another path")


def refuse_registry_file(path: Path | str, option: str) -> None:
    """Raise BadInputError when ``path`` (given as ``option``) is any registry's file: an SQLite database, a file
    SQLite or the registry keeps beside one, or a server registry's similarity index. An ordinary file (an earlier
    report or bundle) may be overwritten."""
    path = Path(path).expanduser()
    if is_sqlite_database(path):
        raise BadInputError(
            f"{option} {path} is an SQLite database (a registry?): it would be overwritten; give another path"
        )
    refuse_side_file(path, option)
    if _in_index_folder(path):
        raise BadInputError(f"{option} {path} is a registry's similarity index: give another path")
