"""The registry's own errors. The CLI prints any of them as one line and exits non-zero."""

from __future__ import annotations


class RegistryError(Exception):
    """Base class: an expected failure with a message meant for the user.

    ``http_status``: the status ``registry serve`` answers with when a request meets this error; each class states its
    own, so the server maps errors by type, never by their text. ``cli_hint``: what a user of the command line can do
    about it (a flag to add), said after the fact in parentheses; ``fact`` is the message without it, which is what
    the server answers with, its clients having no such flag."""

    http_status = 400  # the request asked for something the registry refuses

    def __init__(self, *args: object, cli_hint: str | None = None) -> None:
        super().__init__(*args)
        self.cli_hint = cli_hint

    def __str__(self) -> str:
        return self.fact if self.cli_hint is None else f"{self.fact} ({self.cli_hint})"

    @property
    def fact(self) -> str:
        """The message without the command line's hint."""
        return super().__str__()


class DatabaseError(RegistryError):
    """The database cannot be reached or used."""

    http_status = 503  # the server's fault, not the request's: its text names the database, so the log keeps it


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

    http_status = 404


class UnknownDeviceError(RegistryError):
    """A device selector that matches no device, or more than one where exactly one is needed."""


class DeviceNotFoundError(UnknownDeviceError):
    """A device selector that matches no device the registry holds."""

    http_status = 404


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
