"""The registry's own errors. The CLI prints any of them as one line and exits non-zero."""

from __future__ import annotations


class RegistryError(Exception):
    """Base class: an expected failure with a message meant for the user."""


class DatabaseError(RegistryError):
    """The database cannot be reached or used."""


class NoRegistryError(DatabaseError):
    """A read-only command pointed at a database that does not exist yet, or holds no registry: nothing is created."""


NO_REGISTRY_HINT = "only commands that write (import, transfer, tune, db upgrade) create one; check --db"


class SchemaOutdatedError(DatabaseError):
    """The database's schema is at an older revision than this registry needs."""


class AccessDeniedError(DatabaseError):
    """The database refused the connected role a read, a write or a schema change (PostgreSQL's missing rights)."""


ACCESS_HINT = "the registry's owner grants rights with `registry db grant`, see docs/SHARING.md"


class BadInputError(RegistryError):
    """Input that the registry refuses: a malformed log, a corrupt file, a record from another TVM version."""


class NotFoundError(BadInputError):
    """A record, workload or model named by id or name that the registry does not hold."""


class UnknownDeviceError(RegistryError):
    """A device selector that matches no device, or more than one where exactly one is needed."""


class RegistryWarning(UserWarning):
    """Something the user should know that does not stop the command (the CLI prints it as one ``Warning:`` line)."""


def printable(text: object, limit: int | None = None) -> str:
    """``text`` safe to print on a terminal: every character that is not printable (ESC of an ANSI sequence, an OSC
    title's BEL, a newline that forges a line, a bidi override, a lone surrogate) written as ``ascii`` writes it
    (``\\x1b``, ``\\n``, ``\\u202e``), and at most ``limit`` characters. For text from outside (a server's
    answer, a registry's rows) that a message or a table shows."""
    text = str(text)
    if not text.isprintable():  # the usual case, checked in C
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
