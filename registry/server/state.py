"""What the routes of one app share, and how a route asks for it.

``create_app`` keeps the storage, the token gate, the model-page cache and the request limits on ``app.state``; the
routes (``registry.server.api``, ``registry.server.pages``) are module-level functions that take them as FastAPI
dependencies (``Depends``), so one set of routes serves every app, each over its own registry.

Reading ``app.state`` costs nothing, so those dependencies are ``async``: FastAPI runs them in the event loop instead
of sending each to its thread pool. The role checks read the database (a token's row), so they stay plain functions,
run in the thread pool as the handlers are.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request

from registry.server.auth import Gate
from registry.server.problems import HttpProblem
from registry.store.interface import RegistryStorage, ReportReads
from registry.store.values import TokenRow

PULL_PAGES_AT_ONCE = 2  # pages of a pull a worker writes at once


@dataclass
class ServerLimits:
    """How much of a worker the requests may take: the bytes of one pushed bundle, one import at a time (each
    replays its traces on every core already), and at most ``PULL_PAGES_AT_ONCE`` pages of a pull written at once.
    Waiting is done in the event loop, so what waits holds none of the worker's threads."""

    max_upload: int
    pushing: asyncio.Lock = field(default_factory=asyncio.Lock)
    paging: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(PULL_PAGES_AT_ONCE))


class ReportCache:
    """Model pages, kept while the registry holds the same records: a page is derived from records, which are only
    ever added, so one query for the newest record id says whether a kept page is current. A 100-task model with 10^4
    records takes tens of milliseconds to collect and render; a busy page is made once per change, not per request."""

    def __init__(self, store: ReportReads, size: int = 64) -> None:
        self.store, self.size = store, size
        self.kept: collections.OrderedDict[tuple, tuple[int, Any, str | None]] = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, name: str, device: str | None):
        """The model page's content (``registry.report.html.collect``); 404 for a model the registry lacks."""
        return self._entry(name, device)[1]

    def html(self, name: str, device: str | None) -> str:
        """The report's HTML (``registry.report.html.content``), made once per content."""
        from registry.report.html import content

        newest, data, html = self._entry(name, device)
        if html is None:
            html = content(data, links=True)
            with self.lock:
                if self.kept.get((name, device), (None,))[0] == newest:
                    self.kept[(name, device)] = (newest, data, html)
        return html

    def _entry(self, name: str, device: str | None) -> tuple[int, Any, str | None]:
        from registry.report.html import collect

        newest = self.store.newest_record_id()
        key = (name, device)
        with self.lock:
            found = self.kept.get(key)
            if found is not None and found[0] == newest:
                self.kept.move_to_end(key)
                return found
        if not self.store.find_models(name):
            raise HttpProblem(404, f"no model {name!r} in this registry")
        entry = (newest, collect(self.store, name, device=device), None)
        with self.lock:
            self.kept[key] = entry
            while len(self.kept) > self.size:
                self.kept.popitem(last=False)
        return entry


def keep(app_state, store: RegistryStorage, public: bool, max_upload: int) -> None:
    """Put on ``app_state`` (a FastAPI app's ``state``) what the routes take through the dependencies below."""
    app_state.store = store
    app_state.gate = Gate(store, public)
    app_state.reports = ReportCache(store)
    app_state.limits = ServerLimits(max_upload)


async def _storage(request: Request) -> RegistryStorage:
    return request.app.state.store


async def _gate(request: Request) -> Gate:
    return request.app.state.gate


async def _reports(request: Request) -> ReportCache:
    return request.app.state.reports


async def _limits(request: Request) -> ServerLimits:
    return request.app.state.limits


def reader(request: Request) -> TokenRow | None:
    """The request's token if it may read (None: an anonymous read of a public server); else a 401 or 403."""
    return request.app.state.gate.check(request, "reader")


def writer(request: Request) -> TokenRow | None:
    return request.app.state.gate.check(request, "writer")


def admin(request: Request) -> TokenRow | None:
    return request.app.state.gate.check(request, "admin")


Storage = Annotated[RegistryStorage, Depends(_storage)]
TokenGate = Annotated[Gate, Depends(_gate)]
Reports = Annotated[ReportCache, Depends(_reports)]
RequestLimits = Annotated[ServerLimits, Depends(_limits)]
# A route's token, checked once per request: FastAPI calls a dependency once however many of a route's parts ask.
Reader = Annotated[TokenRow | None, Depends(reader)]
Writer = Annotated[TokenRow | None, Depends(writer)]
