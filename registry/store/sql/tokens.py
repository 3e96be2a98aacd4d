"""The tokens ``registry serve`` admits (table ``api_token``): only each token's sha256 is stored."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Connection, select, update
from sqlalchemy.exc import IntegrityError

from registry.errors import BadInputError
from registry.store.rows import utc
from registry.store.sql.models import ApiToken
from registry.store.validation import name_problem
from registry.store.values import ROLES, TokenRow

_COLUMNS = (ApiToken.name, ApiToken.role, ApiToken.created_at, ApiToken.revoked_at, ApiToken.expires_at)


def add(conn: Connection, name: str, role: str, digest: str, expires_at: dt.datetime | None = None) -> None:
    problem = name_problem(name, "a token's name")
    if problem:  # it is printed by `registry token list` and named in refusals: printable text only
        raise BadInputError(problem)
    if role not in ROLES:
        raise BadInputError(f"no role {role!r}: a token is a {', '.join(ROLES[:-1])} or {ROLES[-1]}")
    if conn.execute(select(ApiToken.id).where(ApiToken.name == name)).first():
        raise BadInputError(f"a token named {name!r} exists (revoked ones keep their names): choose another name")
    try:
        conn.execute(
            ApiToken.__table__.insert().values(
                name=name, role=role, digest=digest, expires_at=None if expires_at is None else utc(expires_at)
            )
        )
    except IntegrityError:  # the same name, written by another process since the check (the write is rolled back)
        raise BadInputError(f"a token named {name!r} exists: choose another name") from None


def all_tokens(conn: Connection) -> list[TokenRow]:
    return [TokenRow(*row) for row in conn.execute(select(*_COLUMNS).order_by(ApiToken.id))]


def revoke(conn: Connection, name: str) -> bool:
    done = conn.execute(
        update(ApiToken).where(ApiToken.name == name, ApiToken.revoked_at.is_(None)).values(revoked_at=_now())
    )
    return bool(done.rowcount)


def by_digest(conn: Connection, digest: str) -> TokenRow | None:
    found = conn.execute(select(*_COLUMNS).where(ApiToken.digest == digest)).first()
    return None if found is None else TokenRow(*found)


def _now():
    return dt.datetime.now(dt.UTC)
