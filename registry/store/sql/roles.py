"""PostgreSQL roles for a shared registry: a read-only consumer and a writer, granted by the registry's owner.

The owner (the role that created the tables with `registry db upgrade`) keeps the schema: neither role may run DDL,
so neither can migrate. A grant states the role's whole access, not an addition to it: it first revokes what the role
had on the registry's tables, so that making a writer read-only takes its write rights away. ALTER DEFAULT PRIVILEGES
makes the tables and sequences a later migration adds (created by the owner) follow the same rights.

SQLite has no roles: who may read or write an SQLite registry is decided by the file's permissions. No TVM here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.dialects import postgresql

from registry.errors import AccessDeniedError, BadInputError, NoRegistryError
from registry.store.sql.revision import VERSION_TABLE
from registry.store.values import ACCESS, READ_ONLY, WRITER

# PostgreSQL's identifiers are at most 63 bytes; pg_ is reserved for its own roles. Quoting alone would make any name
# safe in SQL, but a name with spaces or quotes is far more likely a mistake than a role.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.@-]{0,62}")
_QUOTE = postgresql.dialect().identifier_preparer.quote_identifier  # always quotes: case and dashes survive

TABLE_RIGHTS = {READ_ONLY: "SELECT", WRITER: "SELECT, INSERT, UPDATE, DELETE"}
SEQUENCE_RIGHTS = {READ_ONLY: "SELECT", WRITER: "USAGE, SELECT"}  # nextval needs USAGE: a writer's INSERT does


def check_name(role: str) -> str:
    """The role name, or BadInputError for one PostgreSQL would not take or that cannot be a registry's role."""
    if not _NAME.fullmatch(role) or len(role.encode()) > 63:
        raise BadInputError(
            f"{role!r} is not a role name: use up to 63 letters, digits and _ . @ -, starting with a letter or _"
        )
    if role.lower().startswith("pg_") or role.lower() == "public":
        raise BadInputError(f"{role!r} is PostgreSQL's own role name; grant to a role of the registry's users")
    return role


@dataclass(frozen=True)
class Place:
    """Where the registry lives: its database, its schema and the role that owns its tables."""

    database: str
    schema: str
    owner: str | None  # None: the role that runs the statements (a printed script is run by the owner)


def statements(role: str, access: str, place: Place) -> list[str]:
    """The SQL that makes ``role`` exactly a ``access`` user of the registry at ``place``."""
    if access not in ACCESS:
        raise ValueError(access)
    r, s, db = _QUOTE(check_name(role)), _QUOTE(place.schema), _QUOTE(place.database)
    defaults = (
        "ALTER DEFAULT PRIVILEGES" + (f" FOR ROLE {_QUOTE(place.owner)}" if place.owner else "") + f" IN SCHEMA {s}"
    )
    return [
        f"GRANT CONNECT ON DATABASE {db} TO {r}",
        f"GRANT USAGE ON SCHEMA {s} TO {r}",
        # What the role had before goes first: a grant states its whole access.
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {r}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {r}",
        f"{defaults} REVOKE ALL ON TABLES FROM {r}",
        f"{defaults} REVOKE ALL ON SEQUENCES FROM {r}",
        f"GRANT {TABLE_RIGHTS[access]} ON ALL TABLES IN SCHEMA {s} TO {r}",
        f"GRANT {SEQUENCE_RIGHTS[access]} ON ALL SEQUENCES IN SCHEMA {s} TO {r}",
        f"{defaults} GRANT {TABLE_RIGHTS[access]} ON TABLES TO {r}",
        f"{defaults} GRANT {SEQUENCE_RIGHTS[access]} ON SEQUENCES TO {r}",
    ]


def script(role: str, access: str, database: str, schema: str = "public") -> str:
    """The statements as a psql script, for an owner who would rather run them than have `registry db grant` do it."""
    head = [
        f"-- registry db grant {role} --{access}: run as the owner of the registry's tables, in one transaction",
        "BEGIN;",
    ]
    body = [f"{sql};" for sql in statements(role, access, Place(database, schema, None))]
    return "\n".join([*head, *body, "COMMIT;", ""])


def place_of(conn: Connection) -> Place:
    """The registry of ``conn``'s database: its schema is the one its version table is found in."""
    row = conn.execute(
        text(
            "SELECT current_database(), schemaname, tableowner FROM pg_tables "
            "WHERE tablename = :t AND schemaname = ANY (current_schemas(false)) "
            "ORDER BY array_position(current_schemas(false), schemaname::name) LIMIT 1"
        ),
        {"t": VERSION_TABLE},
    ).one_or_none()
    if row is None:
        return Place(conn.execute(text("SELECT current_database()")).scalar_one(), "", None)
    return Place(*row)


def role_problem(conn: Connection, role: str, place: Place) -> str | None:
    """Why ``role`` cannot be given a registry role, or None."""
    found = conn.execute(text("SELECT rolsuper FROM pg_roles WHERE rolname = :r"), {"r": role}).one_or_none()
    if found is None:
        return f"role {role!r} does not exist; create it first (CREATE ROLE {_QUOTE(role)} LOGIN PASSWORD '...')"
    if found.rolsuper:
        return f"role {role!r} is a superuser, which no GRANT can restrict"
    if role == place.owner:
        return f"role {role!r} owns the registry's tables and keeps every right on them"
    return None


def may_migrate(conn: Connection) -> str | None:
    """The owner of the registry's tables when the connected role is not it (nor a member of it, nor a superuser):
    only the owner can run DDL on them. None when this role may migrate, or when there is no registry yet."""
    owner = place_of(conn).owner
    if owner is None:
        return None
    allowed = conn.execute(
        text(
            "SELECT pg_has_role(current_user, :o, 'USAGE') "
            "OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        ),
        {"o": owner},
    ).scalar()
    return None if allowed else owner


def current_role(conn: Connection) -> str:
    return conn.execute(text("SELECT current_user")).scalar_one()


def grant(conn: Connection, role: str, access: str) -> tuple[Place, list[str]]:
    """Make ``role`` a ``access`` user of the registry in ``conn``'s database, in ``conn``'s transaction; returns where
    and the statements run. Refused, with nothing changed, unless the connected role owns the registry's tables."""
    check_name(role)
    place = place_of(conn)
    if place.owner is None:
        raise NoRegistryError(
            f"database {place.database!r} holds no registry yet; its owner runs `registry db upgrade`"
        )
    owner = may_migrate(conn)
    if owner is not None:
        raise AccessDeniedError(
            f"role {current_role(conn)!r} does not own the registry's tables: {owner!r} grants rights"
        )
    problem = role_problem(conn, role, place)
    if problem:
        raise BadInputError(problem)
    done = statements(role, access, place)
    for sql in done:
        conn.exec_driver_sql(sql)
    return place, done
