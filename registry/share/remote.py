"""Clients of ``registry serve``: ``registry pull URL``, ``registry push URL``, and ``registry sync`` with a URL.

Both ways move bundle pages (``registry.share.bundle``) of at most ``PAGE`` records, in record-id order, each imported
in one transaction together with how far it got (the receiver's ``sync_state``, as database-to-database sync keeps it).
So an interrupted run (even ``kill -9``) loses at most the page in flight, the next run starts after the last page
committed, and a run with nothing new adds nothing. Pulled records are checked here exactly as ``registry import``
checks a bundle; pushed ones by the server, the same way.

The token comes from ``$REGISTRY_TOKEN`` or a file (``--token-file``), never from the command line, where ``ps``
would show it. No TVM here but the checks of what arrives (``exchange_import``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import os
import re
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from registry import hostinfo
from registry.errors import BadInputError, RegistryError, RegistryWarning
from registry.records.write import Progress
from registry.store.interface import RegistryStorage
from registry.store.values import ExchangeFilters

PAGE = 20_000  # records per page: a page's import is one transaction, and what an interruption can cost
TIMEOUT = 900.0  # seconds one request may take: a page's import on the server included
TOKEN_VARIABLE = "REGISTRY_TOKEN"
TOKEN_CHARACTERS = re.compile(r"[A-Za-z0-9_-]{1,200}")
LOOPBACK = ("localhost", "127.0.0.1", "::1")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is refused, not followed: urllib would send the token on to wherever it points (another host, or
    plain HTTP), and turn a push into a GET."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirected to {newurl}; give that URL instead", headers, fp)


_opener = urllib.request.build_opener(_NoRedirects)


class RemoteError(RegistryError):
    """The server refused a request, or could not be reached."""


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def read_token(token_file: Path | None) -> str | None:
    """The token: ``--token-file``'s first line, else ``$REGISTRY_TOKEN``, else None (a public server). Checked to be
    a token's characters, and never quoted back in a message."""
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise BadInputError(
                f"cannot read the token file {token_file}: {getattr(e, 'strerror', None) or e}"
            ) from None
        if not text or len(text.splitlines()) > 1:
            raise BadInputError(f"the token file {token_file} must hold the token alone, on one line")
        where = f"the token file {token_file}"
    else:
        text = (os.environ.get(TOKEN_VARIABLE) or "").strip()
        where = f"${TOKEN_VARIABLE}"
        if not text:
            return None
    if not TOKEN_CHARACTERS.fullmatch(text):
        raise BadInputError(f"{where} does not hold a token (letters, digits, '_' and '-' only)")
    return text


@dataclass
class TransferResult:
    """What a pull or a push counted over all its pages (``ImportOutput``'s fields and more)."""

    url: str
    incremental: bool = False  # whether an earlier run with these filters let this one skip records
    pages: int = 0
    records_read: int = 0
    models: int = 0  # distinct models the records came with
    workloads_new: int = 0
    workloads_present: int = 0
    records_new: int = 0
    records_present: int = 0
    records_skipped: int = 0
    first_skipped: str | None = None
    seconds: float = 0.0
    model_names: set[str] = field(default_factory=set, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("model_names")
        return out

    def add(self, counts: Any) -> None:
        c = counts if isinstance(counts, dict) else asdict(counts)
        for name in ("workloads_new", "workloads_present", "records_new", "records_present", "records_skipped"):
            setattr(self, name, getattr(self, name) + int(c[name]))
        self.first_skipped = self.first_skipped or c.get("first_skipped")


class Remote:
    """A registry served by ``registry serve`` at ``url``."""

    def __init__(self, url: str, token: str | None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BadInputError(f"{url!r} is not an http:// or https:// URL of a registry server")
        self.url = url.rstrip("/")
        self.token = token
        if token and parts.scheme == "http" and parts.hostname not in LOOPBACK:
            warnings.warn(
                f"sending a token to {parts.hostname} over plain HTTP: anyone on the way can read it; use https://",
                RegistryWarning,
                stacklevel=2,
            )

    def _open(self, method: str, path: str, params: dict | None = None, body: Path | None = None):
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        request = urllib.request.Request(f"{self.url}{path}" + (f"?{query}" if query else ""), method=method)
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", f"tvm-registry/{hostinfo.tool_version()}")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        data = None
        if body is not None:
            request.add_header("Content-Type", "application/zip")
            request.add_header("Content-Length", str(body.stat().st_size))
            data = body.open("rb")
        try:
            return _opener.open(request, data=data, timeout=TIMEOUT)
        except urllib.error.HTTPError as e:
            detail = e.msg if 300 <= e.code < 400 else _detail(e)
            raise RemoteError(f"{self.url}: {e.code} {detail}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise RemoteError(f"cannot reach {self.url}: {reason}") from None
        finally:
            if data is not None:
                data.close()

    def json(self, method: str, path: str, params: dict | None = None, body: Path | None = None) -> dict:
        with self._open(method, path, params, body) as r, self._reading():
            try:
                return orjson.loads(r.read())
            except orjson.JSONDecodeError:
                raise RemoteError(f"{self.url}{path}: the answer is not JSON (is this a registry server?)") from None

    def download(self, path: str, params: dict, dest: Path) -> None:
        with self._open("GET", path, params) as r, self._reading(), dest.open("wb") as f:
            while block := r.read(1 << 20):
                f.write(block)

    @contextlib.contextmanager
    def _reading(self):
        """An answer cut off mid-way (the server stopped, the network failed) is one line, like a refused one."""
        try:
            yield
        except (http.client.HTTPException, OSError) as e:
            raise RemoteError(f"{self.url}: the answer broke off ({type(e).__name__}: {e})") from None


def _detail(e: urllib.error.HTTPError) -> str:
    """A problem document's one line, or the status's phrase."""
    try:
        doc = orjson.loads(e.read()[:65536])
        return str(doc.get("detail") or doc.get("title") or e.reason)
    except (orjson.JSONDecodeError, AttributeError, OSError):
        return str(e.reason)


def _params(device: str | None, team: str | None, model: str | None, since: dt.datetime | None) -> dict:
    return {"device": device, "team": team, "model": model, "since": since.isoformat() if since else None}


def pull(
    remote: Remote,
    store: RegistryStorage,
    *,
    device: str | None = None,
    team: str | None = None,
    model: str | None = None,
    since: dt.datetime | None = None,
    full: bool = False,
    page: int = PAGE,
    progress: Progress | None = None,
) -> TransferResult:
    """The server's records matching the filters (``device`` as the server resolves it) into ``store``, page by
    page; each page checked as ``registry import`` checks a bundle, and committed with the progress it makes. The
    next page downloads while this one is checked."""
    from registry.share.bundle import read_bundle
    from registry.share.exchange_import import import_exchange

    start = time.perf_counter()
    filters = _params(device, team, model, since)
    plan = remote.json("GET", "/api/v1/exchange", filters)
    origin, key = str(plan["origin"]), str(plan["filters_key"])
    if origin == store.registry_id():
        raise BadInputError("the server serves this same registry; nothing to pull")
    after = 0 if full else store.last_synced(origin, key)
    result = TransferResult(remote.url, incremental=after > 0)
    with tempfile.TemporaryDirectory(prefix="registry-pull-") as tmp, ThreadPoolExecutor(1) as ahead:

        def fetch(after_id: int, n: int) -> Path:
            path = Path(tmp) / f"page-{n}.bundle"
            remote.download("/api/v1/exchange/bundle", {**filters, "after": after_id, "limit": page}, path)
            return path

        pending = ahead.submit(fetch, after, 0)
        while True:
            path = pending.result()
            records, last = _page_counts(path)
            if last <= after:  # nothing after the last page: done
                break
            # A page may hold fewer records than asked (a row the server could not read is left out, with a warning
            # there): the next one starts after its last id, whatever it held.
            pending = ahead.submit(fetch, last, result.pages + 1)
            exchange, _ = read_bundle(path)
            counts = import_exchange(
                store, exchange, where=f"{remote.url} page {result.pages + 1}", progress=progress,
                sync_mark=(origin, key, last),
            )  # fmt: skip
            path.unlink()
            result.model_names |= {m.name for m in exchange.models}
            result.models = len(result.model_names)
            result.pages += 1
            result.records_read += records
            result.add(counts)
            after = last
    result.seconds = time.perf_counter() - start
    return result


def _page_counts(path: Path) -> tuple[int, int]:
    """(records, last record id) a downloaded page's manifest states (checked in full when it is read)."""
    try:
        with zipfile.ZipFile(path) as zf:
            manifest = orjson.loads(zf.read("manifest.json"))
        return int(manifest["counts"]["records"]), int(manifest.get("last_record_id", 0))
    except (zipfile.BadZipFile, KeyError, TypeError, ValueError, orjson.JSONDecodeError) as e:
        raise RemoteError(f"the server sent a page that is not a readable bundle ({e})") from None


def push(
    remote: Remote,
    store: RegistryStorage,
    filters: ExchangeFilters,
    *,
    full: bool = False,
    page: int = PAGE,
) -> TransferResult:
    """``store``'s records matching ``filters`` that the server lacks, page by page: the server keeps how far pushes
    from this registry with these filters have come, so only what was added since goes."""
    from registry.share.bundle import write_bundle

    start = time.perf_counter()
    origin, key = store.registry_id(), filters.key()
    info = remote.json("GET", "/api/v1/registry")
    if info.get("registry_id") == origin:
        raise BadInputError("the server serves this same registry; nothing to push")
    after = (
        0 if full else int(remote.json("GET", "/api/v1/sync-state", {"origin": origin, "key": key})["last_record_id"])
    )
    result = TransferResult(remote.url, incremental=after > 0)
    with tempfile.TemporaryDirectory(prefix="registry-push-") as tmp:
        path = Path(tmp) / "page.bundle"
        while True:
            with store.read_exchange(filters, after, page) as exchange:
                last = exchange.last_record_id
                if last <= after:  # nothing after the last page: done
                    break
                info = write_bundle(path, exchange, {"push": True})
                result.model_names |= {m.name for m in exchange.models}
                result.models = len(result.model_names)
            counts = remote.json("POST", "/api/v1/bundles", {"sync_key": key}, body=path)
            result.pages += 1
            result.records_read += info.records
            result.add(counts)
            after = last
    result.seconds = time.perf_counter() - start
    return result
