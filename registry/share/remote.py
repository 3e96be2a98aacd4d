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
import hashlib
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from registry import hostinfo
from registry.errors import BadInputError, RegistryError, RegistryWarning, printable
from registry.records.write import Progress
from registry.store.interface import RegistryStorage
from registry.store.validation import MAX_RECORD_ID, REGISTRY_ID
from registry.store.values import ExchangeFilters

PAGE = 20_000  # records per page: a page's import is one transaction, and what an interruption can cost
TOKEN_VARIABLE = "REGISTRY_TOKEN"
TOKEN_CHARACTERS = re.compile(r"[A-Za-z0-9_-]{1,200}")
LOOPBACK = ("localhost", "127.0.0.1", "::1")
MAX_DETAIL = 300  # characters of a refusal's detail quoted to the user
# The first segments of the paths of a server's pages and API: a URL pasted from the browser is cut where one starts.
PAGE_ROOTS = frozenset(
    {"api", "models", "workloads", "records", "devices", "teams", "search", "compare", "login", "logout",
     "openapi.json"}
)  # fmt: skip
# A server's address written without its scheme: host:port (a name, an IPv4 or a bracketed IPv6 address), or localhost.
HOST_PORT = re.compile(
    r"(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})(?:/\S*)?|localhost(?:/\S*)?"
)
TOKEN_HINT = "--token-file FILE or $REGISTRY_TOKEN"


@dataclass(frozen=True)
class Limits:
    """What a client waits for and reads from a server, which may be hostile or broken. Each bound has an
    environment variable (docs/SERVER.md); the defaults fit a healthy server's largest answers many times over."""

    idle_s: float = 120.0  # no byte for this long: the server is gone ($REGISTRY_HTTP_IDLE_S)
    # one answer, whole: a page's import on the server, or a page's download, takes minutes at most
    answer_s: float = 900.0  # ($REGISTRY_HTTP_ANSWER_S)
    json_bytes: int = 16 << 20  # a JSON answer is a few hundred bytes ($REGISTRY_HTTP_MAX_JSON)
    page_bytes: int = 2 << 30  # a bundle page of 100,000 records is about 100 MB ($REGISTRY_HTTP_MAX_PAGE)
    # pages in a row that hold fewer records than asked and do not end the pull: a server leaves out only the
    # rows it cannot read, so a run of short pages is a server stepping through ids one page at a time
    short_pages: int = 16  # ($REGISTRY_HTTP_SHORT_PAGES)

    @classmethod
    def from_env(cls) -> Limits:
        names = {"idle_s": "IDLE_S", "answer_s": "ANSWER_S", "json_bytes": "MAX_JSON", "page_bytes": "MAX_PAGE",
                 "short_pages": "SHORT_PAGES"}  # fmt: skip
        values = {}
        for name, suffix in names.items():
            text = os.environ.get(f"REGISTRY_HTTP_{suffix}")
            if text is None:
                continue
            kind = type(getattr(cls, name))
            try:
                value = kind(text)
            except ValueError:
                value = None
            if value is None or not (0 < value < float("inf")):
                raise BadInputError(f"$REGISTRY_HTTP_{suffix} is {text!r}, not a positive {kind.__name__}")
            values[name] = value
        return cls(**values)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is refused, not followed: urllib would send the token on to wherever it points (another host, or
    plain HTTP), and turn a push into a GET."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirected to {newurl}; give that URL instead", headers, fp)


_opener = urllib.request.build_opener(_NoRedirects)


class RemoteError(RegistryError):
    """The server refused a request, could not be reached, or answered what no registry server sends. ``status``:
    the HTTP status of a refusal (None for the others)."""

    def __init__(self, message: str, status: int | None = None, cli_hint: str | None = None) -> None:
        super().__init__(message, cli_hint=cli_hint)
        self.status = status


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def missing_scheme(text: str) -> str | None:
    """What is wrong with ``text`` if it is a server's address without its scheme (``host:8000``), else None: such
    text would be taken for a bundle's name or a database file."""
    if is_url(text) or not HOST_PORT.fullmatch(text):
        return None
    return f"{printable(text, 100)!r} has no scheme: write http://{printable(text, 100)} (or https://)"


def server_root(url: str) -> tuple[str, str | None]:
    """A registry server's root URL from what was given: the root itself, or the address of one of its pages or API
    routes (pasted from a browser), cut where the page's path starts; and the model a ``/models/NAME`` page shows
    (None otherwise). A server behind a proxy under a path prefix (``https://host/registry``) keeps its prefix."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - read to refuse a port that is not a number here, not at the first request
    except ValueError as e:  # "Invalid IPv6 URL", a port that is no number
        raise BadInputError(f"{printable(url, 100)!r} is not a URL: {printable(str(e), 100)}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadInputError(f"{printable(url, 100)!r} is not an http:// or https:// URL of a registry server")
    segments = parts.path.split("/")
    cut, model = len(segments), None
    for i, segment in enumerate(segments):
        if segment in PAGE_ROOTS:
            cut = i
            if segment == "models" and "/".join(segments[i + 1 :]):
                model = urllib.parse.unquote("/".join(segments[i + 1 :]))
            break
    path = "/".join(segments[:cut]).rstrip("/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", "")), model


TOKEN_FILE_BYTES = 4096  # a token is tens of characters; a file longer than this is not one


def read_token(token_file: Path | None) -> str | None:
    """The token: ``--token-file``'s first line, else ``$REGISTRY_TOKEN``, else None (a public server). Checked to be
    a token's characters, and never quoted back in a message."""
    if token_file is not None:
        try:
            with open(token_file, "rb") as f:  # bounded: /dev/zero, or a large file named by mistake, is no token
                raw = f.read(TOKEN_FILE_BYTES + 1)
            if len(raw) > TOKEN_FILE_BYTES:
                raise BadInputError(f"the token file {token_file} holds more than a token ({TOKEN_FILE_BYTES} bytes)")
            text = raw.decode("utf-8").strip()
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
    """A registry served by ``registry serve`` at ``url``. Everything it answers is a claim: read within ``limits``,
    and checked before anything is kept."""

    def __init__(self, url: str, token: str | None, limits: Limits | None = None) -> None:
        self.url, _ = server_root(url)
        parts = urllib.parse.urlsplit(self.url)
        self.token = token
        self.limits = limits or Limits.from_env()
        if token and parts.scheme == "http" and parts.hostname not in LOOPBACK:
            warnings.warn(
                f"sending a token to {parts.hostname} over plain HTTP: anyone on the way can read it; use https://",
                RegistryWarning,
                stacklevel=2,
            )

    def _open(self, method: str, path: str, params: dict | None = None, body: Path | bytes | None = None):
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        request = urllib.request.Request(f"{self.url}{path}" + (f"?{query}" if query else ""), method=method)
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", f"tvm-registry/{hostinfo.tool_version()}")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        data = None
        if isinstance(body, bytes):  # a JSON request (a tuning run's leases: registry.share.served_run)
            request.add_header("Content-Type", "application/json")
            data = body
        elif body is not None:
            request.add_header("Content-Type", "application/zip")
            request.add_header("Content-Length", str(body.stat().st_size))
            data = body.open("rb")
        # A push's answer comes once the server has imported the page: the idle bound is the whole answer's there.
        idle = self.limits.answer_s if isinstance(body, Path) else self.limits.idle_s
        try:
            return _opener.open(request, data=data, timeout=idle)
        except http.client.InvalidURL as e:  # a typo in the address: "nonnumeric port"
            raise BadInputError(f"{printable(self.url, 100)!r} is not a URL: {printable(str(e), 100)}") from None
        except urllib.error.HTTPError as e:
            detail = e.msg if 300 <= e.code < 400 else _detail(e)
            raise RemoteError(
                f"{self.url}: {e.code} {printable(str(detail), MAX_DETAIL)}", status=e.code, cli_hint=self._hint(e.code)
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                raise RemoteError(f"{self.url}: no answer for {idle:g} s") from None
            raise RemoteError(f"cannot reach {self.url}: {printable(str(reason), MAX_DETAIL)}") from None
        finally:
            if isinstance(body, Path) and data is not None:
                data.close()

    def _hint(self, status: int) -> str | None:
        """What the user can do about a refusal, in the command line's terms: the server names a header."""
        if status != 401:
            return None
        if self.token is None:
            return f"no token was given: give one with {TOKEN_HINT}"
        return f"the token given was refused: check {TOKEN_HINT}"

    def json(self, method: str, path: str, params: dict | None = None, body: Path | bytes | None = None) -> Any:
        """The answer's JSON, read whole within the limits (its shape is the caller's to check)."""
        with self._open(method, path, params, body) as r, self._reading():
            data = b"".join(self._blocks(r, self.limits.json_bytes, path))
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise RemoteError(f"{self.url}{path}: the answer is not JSON (is this a registry server?)") from None

    def download(self, path: str, params: dict, dest: Path) -> None:
        with self._open("GET", path, params) as r, self._reading(), dest.open("wb") as f:
            for block in self._blocks(r, self.limits.page_bytes, path):
                f.write(block)

    def _blocks(self, r, limit: int, path: str) -> Iterator[bytes]:
        """The answer's body in blocks: at most ``limit`` bytes, all of it within ``answer_s`` (a server sending a
        byte every few seconds never trips the idle bound)."""
        deadline = time.monotonic() + self.limits.answer_s
        size = 0
        while block := r.read1(1 << 16):  # what one read of the socket gives: the deadline is checked often
            size += len(block)
            if size > limit:
                raise RemoteError(
                    f"{self.url}{path}: the answer is larger than {limit} bytes (a bound: docs/SERVER.md)"
                )
            if time.monotonic() > deadline:
                raise RemoteError(f"{self.url}{path}: the answer took longer than {self.limits.answer_s:g} s")
            yield block

    @contextlib.contextmanager
    def _reading(self):
        """An answer cut off mid-way (the server stopped, the network failed) is one line, like a refused one."""
        try:
            yield
        except TimeoutError:
            raise RemoteError(f"{self.url}: the answer stopped for {self.limits.idle_s:g} s") from None
        except (http.client.HTTPException, OSError) as e:
            raise RemoteError(f"{self.url}: the answer broke off ({type(e).__name__}: {e})") from None


def _field(answer: Any, name: str, check, what: str, where: str) -> Any:
    """``answer[name]``, if ``answer`` is a JSON object and the value passes ``check``; else one RemoteError line."""
    value = answer.get(name) if isinstance(answer, dict) else None
    try:
        ok = value is not None and check(value)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise RemoteError(f"{where}: the answer's {name!r} is not {what} (is this a registry server?)")
    return value


def _is_record_id(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_RECORD_ID


def _is_registry_id(value: Any) -> bool:
    return type(value) is str and REGISTRY_ID.fullmatch(value) is not None


def _detail(e: urllib.error.HTTPError) -> str:
    """A problem document's one line, or the status's phrase (made printable by the caller)."""
    try:
        doc = orjson.loads(e.read(65536))
        return str(doc.get("detail") or doc.get("title") or e.reason)
    except (orjson.JSONDecodeError, AttributeError, OSError, http.client.HTTPException):
        return str(e.reason)


def _params(device: str | None, team: str | None, model: str | None, since: dt.datetime | None) -> dict:
    return {"device": device, "team": team, "model": model, "since": since.isoformat() if since else None}


def pull_key(url: str, filters_key: str) -> str:
    """The key a pull's progress is kept under here: the server's filters key *and its URL*. The origin a server
    names is its own claim: another server naming the same origin and filters must not move this one's mark."""
    parts = urllib.parse.urlsplit(url)
    where = f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port or ''}{parts.path.rstrip('/')}"
    return hashlib.sha256(f"pull\0{where}\0{filters_key}".encode()).hexdigest()


@dataclass(frozen=True)
class PullPlan:
    """What a pull asks for (its query parameters) and what the server said of it: its registry id, and the key this
    side keeps the pull's progress under."""

    filters: dict[str, Any]
    origin: str
    key: str


def plan_pull(
    remote: Remote,
    device: str | None = None,
    team: str | None = None,
    model: str | None = None,
    since: dt.datetime | None = None,
) -> PullPlan:
    """Asks the server about a pull of these filters, before anything is opened here: a device, team or model it
    holds no record of is refused (404, naming what it holds), so a misspelt filter creates no registry."""
    filters = _params(device, team, model, since)
    where = f"{remote.url}/api/v1/exchange"
    plan = remote.json("GET", "/api/v1/exchange", filters)
    origin = _field(plan, "origin", _is_registry_id, "a registry id", where)
    key = pull_key(remote.url, _field(plan, "filters_key", lambda v: type(v) is str and len(v) <= 64, "a key", where))
    return PullPlan(filters, origin, key)


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
    plan: PullPlan | None = None,
) -> TransferResult:
    """The server's records matching the filters (``device`` as the server resolves it) into ``store``, page by
    page; each page checked as ``registry import`` checks a bundle, and committed with the progress it makes. The
    next page downloads while this one is checked. ``plan``: ``plan_pull``'s of the same filters, if asked already."""
    from registry.share.bundle import read_bundle
    from registry.share.exchange_import import import_exchange

    start = time.perf_counter()
    plan = plan or plan_pull(remote, device, team, model, since)
    filters, origin, key = plan.filters, plan.origin, plan.key
    if origin == store.registry_id():
        raise BadInputError("the server serves this same registry; nothing to pull")
    after = 0 if full else store.last_synced(origin, key)
    result = TransferResult(remote.url, incremental=after > 0)
    short = 0  # pages in a row with fewer records than asked
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
            if records > last - after:  # ids are distinct: a page cannot hold more than its range of them
                raise RemoteError(
                    f"{remote.url}: a page claims {records} records between ids {after} and {last} (is this a registry "
                    "server?)"
                )
            # A page may hold fewer records than asked (a row the server could not read is left out, with a warning
            # there): the next one starts after its last id, whatever it held; but not forever.
            short = short + 1 if records < page else 0
            if short > remote.limits.short_pages:
                raise RemoteError(
                    f"{remote.url}: {short} pages in a row held fewer records than asked without ending the pull; "
                    f"stopped (what came before is kept; a bound: docs/SERVER.md)"
                )
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
            manifest = orjson.loads(zf.read("manifest.json")) if zf.getinfo("manifest.json").file_size < 1 << 20 else {}
        records, last = manifest["counts"]["records"], manifest.get("last_record_id", 0)
    except (zipfile.BadZipFile, KeyError, TypeError, ValueError, orjson.JSONDecodeError) as e:
        raise RemoteError(f"the server sent a page that is not a readable bundle ({e})") from None
    if not (_is_record_id(records) and _is_record_id(last)):
        raise RemoteError(f"the server sent a page whose manifest counts {records!r} records up to id {last!r}")
    return records, last


def push(
    remote: Remote,
    store: RegistryStorage,
    filters: ExchangeFilters,
    *,
    full: bool = False,
    page: int = PAGE,
    skip_invalid: bool = False,
) -> TransferResult:
    """``store``'s records matching ``filters`` that the server lacks, page by page: the server keeps how far pushes
    from this registry with these filters and this token have come, so only what was added since goes.
    ``skip_invalid``: the server leaves out a record it refuses (counted, the first named) instead of the page."""
    from registry.share.bundle import write_bundle

    start = time.perf_counter()
    origin, key = store.registry_id(), filters.key()
    info = remote.json("GET", "/api/v1/registry")
    if isinstance(info, dict) and info.get("registry_id") == origin:
        raise BadInputError("the server serves this same registry; nothing to push")
    after = 0
    if not full:
        state = remote.json("GET", "/api/v1/sync-state", {"origin": origin, "key": key})
        after = _field(state, "last_record_id", _is_record_id, "a record id", f"{remote.url}/api/v1/sync-state")
        newest = store.newest_record_id()
        if after > newest:  # a mark no push from here could have set: the server's, or someone's, error
            warnings.warn(
                f"{remote.url} says pushes from this registry reached record {after}, past its newest ({newest}): "
                "pushing every record again (those the server holds are found present)",
                RegistryWarning,
                stacklevel=2,
            )
            after = 0
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
            params = {"sync_key": key, **({"skip_invalid": "true"} if skip_invalid else {})}
            counts = remote.json("POST", "/api/v1/bundles", params, body=path)
            _check_counts(counts, f"{remote.url}/api/v1/bundles")
            result.pages += 1
            result.records_read += info.records
            result.add(counts)
            after = last
    result.seconds = time.perf_counter() - start
    return result


def _check_counts(counts: Any, where: str) -> None:
    """An import's counts as a server answers them: whole numbers, and a first refusal that is text."""
    for name in ("workloads_new", "workloads_present", "records_new", "records_present", "records_skipped"):
        _field(counts, name, _is_record_id, "a count", where)
    skipped = counts.get("first_skipped")
    if skipped is not None and type(skipped) is not str:
        raise RemoteError(f"{where}: the answer's 'first_skipped' is not text (is this a registry server?)")
    if skipped is not None:
        counts["first_skipped"] = printable(skipped, MAX_DETAIL)
