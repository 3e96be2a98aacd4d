"""Database URLs as the registry shows them: with the password hidden. No SQLAlchemy and no TVM: light commands and
error messages show URLs before (or without) opening a database.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, quote_plus, unquote

# SQLAlchemy's URL grammar (sqlalchemy.engine.url._parse_url): ``redact`` parses a URL as the engine does, so the
# text it shows is the engine's own, and a URL's digest (own_files.index_path) names the same file either way.
_URL = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.X,
)


def redact(url: str) -> str:
    """``url`` with its password shown as ``***``, rendered as SQLAlchemy renders it (``render_as_string``); text
    that is no URL comes back as given. A port that is not a number raises ValueError, as SQLAlchemy's parser does."""
    m = _URL.match(url)
    if m is None:
        return url
    parts = m.groupdict()
    text = parts["name"] + "://"
    if parts["username"] is not None:
        text += quote(unquote(parts["username"]), safe=" +")
        text += ":***" if parts["password"] is not None else ""
        text += "@"
    host = parts["ipv4host"] or parts["ipv6host"]
    if host is not None:
        text += f"[{host}]" if ":" in host else host
    if parts["port"] is not None:
        text += ":" + str(int(parts["port"]))
    if parts["database"] is not None:
        text += "/" + quote(unquote(parts["database"]), safe=" +/")
    return text + _query_text(parts["query"])


def _query_text(query: str | None) -> str:
    """A URL's query as SQLAlchemy renders it: blank values dropped, keys sorted, a repeated key's values in order."""
    values: dict[str, list[str]] = {}
    for key, value in parse_qsl(query or ""):
        values.setdefault(key, []).append(value)
    pairs = [f"{quote_plus(key)}={quote_plus(value)}" for key in sorted(values) for value in values[key]]
    return "?" + "&".join(pairs) if pairs else ""
