"""Tokens and roles: who may do what over HTTP.

A token is 32 random bytes (``rgt_`` and URL-safe base64), printed once by ``registry token create``; the registry
stores only its sha256 (``Tokens.add_token``), so a copy of the database gives nobody a token. A request
names its token as ``Authorization: Bearer TOKEN``; a browser, which cannot add that header without a script, signs
in once through the sign-in form, which keeps the token in an HttpOnly cookie that only GET requests honour (a write
needs the header: no page of another site can make a browser push).

A token may expire (``registry token create --expires``): from then on it is refused with a 401 naming its expiry,
as a revoked one is refused.

Roles nest: a reader reads everything, a writer also pushes bundles, an admin also lists and revokes tokens. A server
started with ``--public`` lets a request without a token read (a request with a bad token is still refused).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from fastapi import Request

from registry.errors import RegistryError
from registry.server.problems import HttpProblem
from registry.store.interface import Tokens
from registry.store.rows import utc_text
from registry.store.values import ROLES, TokenRow

PREFIX = "rgt_"
COOKIE = "registry_token"
MAX_TOKEN = 200  # characters: a longer one is no token of ours, refused before it is hashed

# What each role is needed for, as a refusal names it.
NEEDED_FOR = {"reader": "read this registry", "writer": "push records", "admin": "manage tokens"}


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def presented(request: Request) -> str | None:
    """The token a request names: its bearer token, else (for a GET) the sign-in cookie."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise HttpProblem(401, "the Authorization header must be 'Bearer TOKEN'", {"WWW-Authenticate": "Bearer"})
        return token.strip()
    if request.method in ("GET", "HEAD"):
        return request.cookies.get(COOKIE)
    return None


class Gate:
    """Checks a request's token against the store for a role; ``public``: no token reads."""

    def __init__(self, store: Tokens, public: bool) -> None:
        self.store = store
        self.public = public

    def check(self, request: Request, role: str) -> TokenRow | None:
        """The request's token, if it may act as ``role``; None for an anonymous read of a public server. Raises
        HttpProblem 401 (no token, or not one of ours) or 403 (a role short of ``role``)."""
        token = presented(request)
        found = self._found(request, token)
        refusal = refusal_of(found) if token is not None else None
        if token is None or refusal is not None:
            anonymous = token is None or "authorization" not in request.headers
            if self.public and role == "reader" and anonymous:
                return None  # a revoked or expired sign-in cookie must not lock a browser out of what anyone may read
            if token is None:
                raise HttpProblem(
                    401,
                    f"a token is needed to {NEEDED_FOR[role]}: send 'Authorization: Bearer TOKEN' (an admin makes "
                    "one with `registry token create`)",
                    {"WWW-Authenticate": "Bearer"},
                )
            raise HttpProblem(401, refusal, {"WWW-Authenticate": "Bearer"})
        if not found.may(role):
            raise HttpProblem(
                403, f"token {found.name!r} is a {found.role}'s: a {role} token is needed to {NEEDED_FOR[role]}"
            )
        return found

    def stored(self, token: str) -> TokenRow | None:
        """The stored token of this text, revoked, expired or not; None for one unknown or too long to be ours."""
        return self.store.token(digest(token)) if len(token) <= MAX_TOKEN else None

    def _found(self, request: Request, token: str | None) -> TokenRow | None:
        """``stored(token)``, looked up once per request: the route's check, the handler's and the page's header all
        ask, and each asking was a query."""
        if token is None:
            return None
        if not hasattr(request.state, "registry_token"):
            request.state.registry_token = self.stored(token)
        return request.state.registry_token

    def role_of(self, request: Request) -> str | None:
        """The role the request may act with, for a page to show (None: anonymous, or not signed in)."""
        try:
            found = self.check(request, "reader")
        except (HttpProblem, RegistryError):  # an error page is shown even while the database is down
            return None
        return None if found is None else found.role


def refusal_of(found: TokenRow | None) -> str | None:
    """Why a presented token is not admitted (one line, naming its expiry when that is why); None when it is."""
    if found is None or found.revoked_at is not None:
        return "the token is not valid here (unknown or revoked)"
    if found.expired(dt.datetime.now(dt.UTC)):
        return (
            f"token {found.name!r} expired at {utc_text(found.expires_at)}: an admin makes a new one with "
            "`registry token create --expires DURATION`"
        )
    return None


__all__ = ["COOKIE", "Gate", "ROLES", "digest", "new_token", "presented", "refusal_of"]
