"""Where the registry keeps its data, and which database a command talks to."""

from __future__ import annotations

import os
from pathlib import Path

from registry.errors import BadInputError

DATABASE_URL_ENV = "REGISTRY_DATABASE_URL"
HOME_ENV = "REGISTRY_HOME"


def registry_home() -> Path:
    """The per-user data folder: ``$REGISTRY_HOME``, else ``$XDG_DATA_HOME/tvm-registry``, else
    ``~/.local/share/tvm-registry``."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg).expanduser() / "tvm-registry"


def default_database_url() -> str:
    return f"sqlite:///{registry_home() / 'registry.db'}"


_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def database_url(value: str) -> str:
    """``value`` as a SQLAlchemy URL: a URL as it is; a plain file path (one with a ``/``, a ``~``, an SQLite suffix
    such as ``.db``, or an existing file) as the URL of that SQLite file. Anything else is left for the engine to
    refuse as "not a database URL"."""
    if "://" in value or value.startswith("sqlite:"):
        return value
    path = Path(value).expanduser()
    if "/" in value or value.startswith("~") or path.suffix.lower() in _SQLITE_SUFFIXES or path.is_file():
        return f"sqlite:///{path.absolute()}"
    return value


def resolve_database_url(url: str | os.PathLike | None = None) -> str:
    """An explicit URL (or SQLite file path) wins, then ``$REGISTRY_DATABASE_URL``, then the embedded SQLite file."""
    if url is not None and not isinstance(url, (str, os.PathLike)):
        raise BadInputError(f"database: expected a URL or an SQLite file path, got {type(url).__name__}")
    given = os.fspath(url) if url is not None else ""
    return database_url(given or os.environ.get(DATABASE_URL_ENV) or default_database_url())
