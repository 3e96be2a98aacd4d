"""A model run against a served registry: ``registry transfer|tune --db https://...`` with a writer's token.

The run reads the server (``RestStorage``: donors, records, the similarity data, predictors) as the shared side of an
overlay (``registry.share.overlay``) whose local side is this machine's *outbox* for that server, an SQLite file
under the registry's home (``outbox_path``). Every write lands there first, in its own transaction, then travels:

- **Records** are pushed (``registry.share.remote.push``: a bundle, checked by the server as any push is, "imported"
  there) before each effort update and lease release, and before the run reports. A task's records are on the
  server before another machine can take the task over, so it resumes from them and measures none of them again.
  Each push sends every record of the outbox the server's mark (for this outbox and token) has not reached, a killed
  run's leftovers included; one the server refuses is left out and named once (``skip_invalid``), so it cannot
  stop every later push.
- **Leases and effort** go to the server itself (``registry.server.leases_api``): the run names its device and its
  tasks' workloads once, gets the server's ids, and takes, renews and releases leases by them. Tuning machines that
  share only the URL divide the tasks as runs on one database do (``registry.pipeline.effort``).

Nothing acknowledged is lost: a record is in the outbox before anything is sent, and pushes resume where the server's
mark says the last one ended, so a run cut off from the server fails with one line naming the outbox, and
``registry --db OUTBOX push URL`` sends what is left.
"""

from __future__ import annotations

import hashlib
import urllib.parse
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from registry.config import registry_home
from registry.errors import BadInputError, RegistryError, RegistryWarning, printable
from registry.share.overlay import SHARED_BASE, OverlayStorage
from registry.share.remote import RemoteError, push, server_root
from registry.share.rest_storage import RestStorage
from registry.store.factory import open_storage
from registry.store.values import Effort, EffortUpdate, ExchangeFilters

TASKS = "/api/v1/tasks"
LEASES = "/api/v1/leases"
MAX_HELD_BY = 200  # characters of a lease holder's name as a server answers it
LEASE_WHILE_PUSHING = 300.0  # seconds leases are renewed for during a push, when the run took none yet


def outbox_path(url: str) -> Path:
    """This machine's outbox for the server at ``url``: one SQLite file per server, kept between runs."""
    url = server_root(url)[0]
    parts = urllib.parse.urlsplit(url)
    host = "".join(c if c.isalnum() or c in ".-" else "_" for c in (parts.hostname or "server"))[:60]
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:8]
    return registry_home() / "outbox" / f"{host}-{parts.port or parts.scheme}-{digest}.db"


def open_served_run(url: str, token: str | None, trust: str = "imported") -> ServedRun:
    """A run's storage on the server at ``url``, whose ``token`` must be a writer's (checked before any work)."""
    shared = RestStorage(url, token)
    path = outbox_path(shared.url)
    path.parent.mkdir(parents=True, exist_ok=True)
    outbox = open_storage(f"sqlite:///{path}", trust=trust)
    run = ServedRun(outbox, shared, path)
    try:
        run.check_writer()
    except BaseException:
        run.overlay.close()
        raise
    return run


class ServedRun(OverlayStorage):
    """An overlay on a served registry whose writes travel to it: records by push, leases and effort by the
    server's lease routes (see the module doc). Ids are the overlay's; the server's are asked for once per task."""

    def __init__(self, outbox, shared: RestStorage, path: Path) -> None:
        super().__init__(outbox, shared)
        self.remote = shared.remote
        self.path = path
        self._server_ids: dict[int, int] = {}  # overlay workload id -> the server's (its devices: _shared_device)
        self._lease_s: float | None = None  # how long this run's leases last (its last take), renewed as long
        self._refused: set[str] = set()  # the server's refusals of the outbox's records, each said once
        self._failed = False  # the last push failed: its one line was raised; closing does not push again

    def check_writer(self) -> None:
        """One line now, not at the first batch's end, when the token cannot write."""
        try:
            self.remote.json("GET", "/api/v1/sync-state", {"origin": self.registry_id(), "key": "0" * 64})
        except RemoteError as e:
            if e.status in (401, 403):
                raise BadInputError(
                    f"{e}: `registry transfer` and `tune` by URL write their records and leases to the server, "
                    "which needs a writer's token (a reader's runs with --overlay FILE)"
                ) from None
            raise

    # -- the server's ids of the run's tasks ---------------------------------------------------------------------

    def _named(self, workload_ids: Sequence[int], device_id: int) -> tuple[list[int], int]:
        """The server's ids of these workloads and of the device, naming to it those it has not been told of."""
        missing = [w for w in workload_ids if w < SHARED_BASE and w not in self._server_ids]
        if missing or self._shared_device(device_id) is None:
            device = next((d for d in self.overlay.all_devices() if d.id == device_id), None)
            if device is None:
                raise BadInputError(f"no device {device_id} in the run's outbox {self.path}")
            found = self.overlay.workloads_by_id(missing)
            if len(found) < len(set(missing)):
                raise BadInputError(f"workload {min(set(missing) - set(found))} is not in the run's outbox {self.path}")
            workloads = [found[w] for w in missing]
            body = {
                "device": {
                    "key": device.key, "target": orjson.loads(device.target_json), "num_threads": device.num_threads,
                    "host_model": device.host_model, "tvm_version": device.tvm_version,
                },
                "workloads": [
                    {"shash": w.shash, "module_equality": w.module_equality, "mod_json": w.mod_json} for w in workloads
                ],
            }  # fmt: skip
            answer = self._post(TASKS, body)
            ids = answer.get("workload_ids") if isinstance(answer, dict) else None
            if not (_is_id(answer.get("device_id")) and isinstance(ids, list) and len(ids) == len(workloads)):
                raise RemoteError(f"{self.remote.url}{TASKS}: the answer is not the ids asked for")
            if not all(_is_id(i) for i in ids):
                raise RemoteError(f"{self.remote.url}{TASKS}: the answer's workload ids are not ids")
            self._shared_keys()[device.key] = answer["device_id"]  # the overlay's reads now find it on the server
            self._server_ids.update(zip((w.id for w in workloads), ids, strict=True))
        theirs = [w - SHARED_BASE if w >= SHARED_BASE else self._server_ids[w] for w in workload_ids]
        return theirs, self._shared_device(device_id)

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            return self.remote.json("POST", path, body=orjson.dumps(body))
        except RemoteError as e:
            raise RemoteError(f"{e}; {self._kept()}", status=e.status, cli_hint=e.cli_hint) from None

    def _kept(self) -> str:
        return f"this run's records are kept in {self.path} (`registry --db {self.path} push {self.remote.url}`)"

    def send_records(self) -> None:
        """Push the outbox's records the server lacks (each push sends only what came after the last); a record the
        server refuses is left out, and said once."""
        try:
            sent = push(self.remote, self.overlay, ExchangeFilters(), skip_invalid=True)
        except RemoteError as e:
            self._failed = True
            raise RemoteError(f"{e}; {self._kept()}", status=e.status, cli_hint=e.cli_hint) from None
        self._failed = False
        if sent.records_skipped and sent.first_skipped not in self._refused:
            self._refused.add(sent.first_skipped)
            warnings.warn(
                f"{self.remote.url} refused {sent.records_skipped} record(s) of the outbox {self.path}; the first: "
                f"{printable(sent.first_skipped or '', 200)}",
                RegistryWarning,
                stacklevel=2,
            )

    # -- leases and effort: the server's -------------------------------------------------------------------------

    def efforts(self, workload_ids: Sequence[int], device_id: int) -> dict[int, Effort]:
        """The server's effort on these tasks (a task it does not hold has none)."""
        shared_device = self._shared_device(device_id)
        if shared_device is None:
            return {}
        known = {w: self._server_ids.get(w) for w in workload_ids if w < SHARED_BASE}
        unnamed = [w for w, s in known.items() if s is None]
        if unnamed:
            found = self.overlay.workloads_by_id(unnamed)
            idents = {w: (found[w].shash, found[w].module_equality) for w in unnamed if w in found}
            ids = self.shared.workload_ids(list(idents.values()))
            known.update({w: ids.get(i) for w, i in idents.items()})
        server = {s: w for w, s in known.items() if s is not None}
        server.update({w - SHARED_BASE: w for w in workload_ids if w >= SHARED_BASE})
        found = self.shared.efforts(list(server), shared_device) if server else {}
        return {server[s]: e for s, e in found.items() if s in server}

    def take_task(self, workload_id: int, device_id: int, holder: str, lease_s: float) -> str | None:
        self._lease_s = lease_s
        (wid,), did = self._named([workload_id], device_id)
        answer = self._post(f"{LEASES}/take", {"workload_id": wid, "device_id": did, "holder": holder,
                                               "lease_s": lease_s})  # fmt: skip
        held_by = answer.get("held_by", "") if isinstance(answer, dict) else ""
        if held_by is not None and not (type(held_by) is str and 0 < len(held_by) <= MAX_HELD_BY):
            raise RemoteError(f"{self.remote.url}{LEASES}/take: the answer names no run (is this a registry server?)")
        return None if held_by is None else printable(held_by, MAX_HELD_BY)

    def renew_tasks(self, holder: str, lease_s: float) -> int:
        return self._count("renew", {"holder": holder, "lease_s": lease_s})

    def save_effort(self, update: EffortUpdate) -> bool:
        # The batch's records on the server before its lease is renewed or released; the leases renewed first, so
        # that a push waiting its turn on a busy server does not outlast them.
        self.renew_tasks(update.holder, update.lease_s or self._lease_s or LEASE_WHILE_PUSHING)
        self.send_records()
        (wid,), did = self._named([update.workload_id], update.device_id)
        body = {
            "workload_id": wid, "device_id": did, "holder": update.holder, "trials": update.added[0],
            "seconds": update.added[1], "curve": [list(p) for p in update.curve], "plateau": update.plateau,
            "lease_s": update.lease_s,
        }  # fmt: skip
        answer = self._post(f"{LEASES}/effort", body)
        kept = answer.get("kept") if isinstance(answer, dict) else None
        if type(kept) is not bool:
            raise RemoteError(f"{self.remote.url}{LEASES}/effort: the answer says nothing of the lease")
        return kept

    def release_tasks(self, holder: str) -> int:
        """Push the run's records, then release its leases: released even when the push fails, so that other runs
        need not wait for them to expire."""
        try:
            self.send_records()
        finally:
            released = self._count("release", {"holder": holder})
        return released

    def release_leases(self, model: str | None, may_run: Callable[[str], bool]) -> tuple[int, dict[str, int]]:
        raise BadInputError("`registry db release-leases` works on the server's database, not by URL")

    def _count(self, action: str, body: dict[str, Any]) -> int:
        answer = self._post(f"{LEASES}/{action}", body)
        count = answer.get("count") if isinstance(answer, dict) else None
        if not (type(count) is int and 0 <= count < 2**63):
            raise RemoteError(f"{self.remote.url}{LEASES}/{action}: the answer is not a count")
        return count

    def close(self) -> None:
        """Send what is left, then close the outbox; a failure is a warning here (the run has reported: see
        ``registry.api``, which sends before it does), and the outbox keeps every record."""
        try:
            if not self._failed:  # a failed push has said its one line already
                self.send_records()
        except RegistryError as e:
            warnings.warn(str(e), RegistryWarning, stacklevel=2)
        finally:
            super().close()


def _is_id(value: Any) -> bool:
    return type(value) is int and 0 < value < 2**63
