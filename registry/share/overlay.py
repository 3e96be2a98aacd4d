"""``OverlayStorage``: a shared registry read, never written, under a local SQLite overlay that takes every write.

A consumer without write access to the team's registry (a read-only PostgreSQL role, or a file it must not change)
runs ``registry transfer`` and ``registry tune`` with ``--overlay local.db``: the model, its tasks, the device and
every record measured go to the overlay, and ``registry sync local.db SHARED`` pushes them later, with the
overlay's registry id as their origin.

Reads compose like TVM's ``OrderedUnionDatabase``: the overlay first, then the shared registry. Why a storage and not
an overlay-aware ``RegistryDatabase``: the model run reads the registry in many places besides MetaSchedule's
``get_top_k`` (transfer's exact hits, donor search over the similarity index, donors' workloads, tuning state to
resume from, the predictor), and all of them go through ``RegistryStorage``; composing there keeps them unchanged.

Ids. The two databases number their rows independently, so one id space is made of both: the overlay's ids as they
are (the run's own model, tasks, device and records all live there, so reports name real rows of the overlay), and
a shared row's id plus ``SHARED_BASE``. A workload or device stored in both is matched by structural hash or device
key: ``top_k``, ``tuning_state`` and the other reads of one workload on one device ask both and merge. Workloads
are looked up (``workload_ids``) in the overlay only: a run records its tasks there before reading anything, and a
workload it commits must be stored where its records will be. The shared registry's workloads appear in the
similarity index under their shifted ids, so a task's own workload measured on other devices of the shared
registry can be one of its donors.

A record transferred from a shared donor cannot name it (``donor_record_id`` is a key into the overlay): it is
written without the link, with its source ``transferred``. Everything not about a model run's records (lookup,
stats, devices, models and their history) is the overlay's own.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from registry.store.factory import open_storage
from registry.store.interface import (
    Administration,
    Batches,
    BrowseFilter,
    BrowsePage,
    Browsing,
    Catalogue,
    Check,
    DeviceCoverage,
    DeviceRecords,
    DeviceRow,
    DeviceSpec,
    DonorRecord,
    DonorRow,
    Effort,
    EffortUpdate,
    Extras,
    IndexedSet,
    IngestResult,
    LeaseStorage,
    LookupFilter,
    LookupRow,
    ModelIn,
    ModelRow,
    PlainTaskRow,
    PredictorIn,
    PredictorInfo,
    RecordHistory,
    RecordIn,
    RecordProvenance,
    RecordReads,
    RecordWrites,
    RegistryStorage,
    RoleGrant,
    Sharing,
    StoredPredictor,
    StoredRecord,
    StoredWorkload,
    TaskRow,
    TokenRow,
    Tokens,
    TuningState,
    Verification,
    Workloads,
)
from registry.store.values import Claim, DeviceListing, ExchangeFilters, ExchangeSet, RegistryStats, Verdict

# Shared rows' ids are shifted by this: far above any id a local SQLite file reaches, within FAISS's int64, and
# readable: shared record 42 is 1000000000042.
SHARED_BASE = 10**12

Ident = tuple[str, str]


def open_overlay(
    shared_url: str | None, overlay_path: str, trust: str = "imported", token: str | None = None
) -> OverlayStorage:
    """The shared registry at ``shared_url``, which must exist and is opened for reading only (nothing is created
    there), under the SQLite overlay at ``overlay_path``, created if missing. An http(s):// ``shared_url`` is a
    served registry, read over HTTP with a reader's ``token`` (None: ``$REGISTRY_TOKEN``, if set) through
    ``RestStorage``; the server's own trust applies to what it answers."""
    from registry.config import resolve_database_url

    if resolve_database_url(shared_url).startswith(("http://", "https://")):
        from registry.share.remote import read_token
        from registry.share.rest_storage import open_served

        shared = open_served(resolve_database_url(shared_url), token if token is not None else read_token(None))
    else:
        shared = open_storage(shared_url, create_new=False, trust=trust)
    try:
        overlay = open_storage(overlay_path if "://" in overlay_path else f"sqlite:///{overlay_path}", trust=trust)
    except BaseException:
        shared.close()
        raise
    return OverlayStorage(overlay, shared)


class OverlayStorage(
    RecordReads, RecordWrites, LeaseStorage, Tokens, Sharing, Verification, Catalogue, Browsing, Administration
):
    """Every storage protocol over (overlay, shared): writes to the overlay, reads from both (see the module doc).

    What it composes is ``RecordReads``, each method merging both stores' answers, and the writes that must not
    carry a shared id into the overlay. Every other method (tokens, sync progress, verify, schema, devices, lookup,
    stats, models and their history) is the overlay's own, answered by it alone."""

    def __init__(self, overlay: RegistryStorage, shared: RegistryStorage) -> None:
        self.overlay, self.shared = overlay, shared
        self.url = overlay.url  # the similarity index of the union is kept beside the overlay file
        self.trust = overlay.trust
        self._shared_devices: dict[str, int] | None = None  # device key -> shared id, read once
        self._overlay_keys: dict[int, str] = {}  # overlay device id -> key
        self._idents: dict[int, Ident] = {}  # overlay workload id -> ident

    def close(self) -> None:
        self.overlay.close()
        self.shared.close()

    # -- mapping ids between the two databases ------------------------------------------------------------------

    def _shared_device(self, device_id: int) -> int | None:
        """The shared registry's id of a device, if it has it."""
        if device_id >= SHARED_BASE:
            return device_id - SHARED_BASE
        if device_id not in self._overlay_keys:
            self._overlay_keys.update({d.id: d.key for d in self.overlay.all_devices()})
        return self._shared_keys().get(self._overlay_keys.get(device_id, ""))

    def _shared_keys(self) -> dict[str, int]:
        if self._shared_devices is None:
            self._shared_devices = {d.key: d.id for d in self.shared.all_devices()}
        return self._shared_devices

    def _device_from_shared(self, shared_id: int) -> int:
        """The union's id of a shared device: the overlay's when it has the same device."""
        key = next((k for k, i in self._shared_keys().items() if i == shared_id), None)
        if key is not None and key not in self._overlay_keys.values():
            self._overlay_keys.update({d.id: d.key for d in self.overlay.all_devices()})
        mine = {k: i for i, k in self._overlay_keys.items()}
        return mine.get(key, shared_id + SHARED_BASE)

    def _shared_workload(self, workload_id: int) -> int | None:
        """The shared registry's id of a workload, if it has it."""
        if workload_id >= SHARED_BASE:
            return workload_id - SHARED_BASE
        if workload_id not in self._idents:
            found = self.overlay.workloads_by_id([workload_id]).get(workload_id)
            if found is None:
                return None
            self._idents[workload_id] = (found.shash, found.module_equality)
        ident = self._idents[workload_id]
        return self.shared.workload_ids([ident]).get(ident)

    def _pair(self, workload_id: int, device_id: int) -> tuple[int, int] | None:
        """(workload, device) in the shared registry, when it has both."""
        wid, did = self._shared_workload(workload_id), self._shared_device(device_id)
        return None if wid is None or did is None else (wid, did)

    @staticmethod
    def _record(r: StoredRecord, workload_id: int | None = None) -> StoredRecord:
        """A shared record, in the union's ids."""
        wid = r.workload_id + SHARED_BASE if workload_id is None else workload_id
        return replace(r, id=r.id + SHARED_BASE, workload_id=wid)

    @staticmethod
    def _workloads(found: dict[int, StoredWorkload]) -> dict[int, StoredWorkload]:
        """Shared workloads, in the union's ids."""
        return {i + SHARED_BASE: replace(w, id=i + SHARED_BASE) for i, w in found.items()}

    @staticmethod
    def _local(records: Sequence[RecordIn]) -> list[RecordIn]:
        """Records to write to the overlay: a donor in the shared registry cannot be linked there."""
        return [replace(r, donor_record_id=None) if (r.donor_record_id or 0) >= SHARED_BASE else r for r in records]

    @staticmethod
    def _split(ids: Iterable[int]) -> tuple[list[int], list[int]]:
        """(overlay ids, shared ids as the shared registry numbers them)."""
        ids = list(ids)
        return [i for i in ids if i < SHARED_BASE], [i - SHARED_BASE for i in ids if i >= SHARED_BASE]

    # -- writes: to the overlay, without shared ids ---------------------------------------------------------------

    def efforts(self, workload_ids: Sequence[int], device_id: int) -> dict[int, Effort]:
        return self.overlay.efforts([w for w in workload_ids if w < SHARED_BASE], device_id)

    def ingest(self, workloads: Workloads, records: Sequence[RecordIn], *, check: Check = None) -> IngestResult:
        return self.overlay.ingest(workloads, self._local(records), check=check)

    def ingest_batches(self, workloads: Workloads, batches: Batches, extras: Extras = None) -> IngestResult:
        return self.overlay.ingest_batches(workloads, lambda: (self._local(b) for b in batches()), extras)

    def add_device(self, spec: DeviceSpec) -> int:
        found = self.overlay.add_device(spec)
        self._overlay_keys[found] = spec.key
        return found

    # -- rows named by id: from the database the id is of ------------------------------------------------------

    def record_provenance(self, record_id: int) -> RecordProvenance:
        if record_id < SHARED_BASE:
            return self.overlay.record_provenance(record_id)
        found = self.shared.record_provenance(record_id - SHARED_BASE)
        return replace(found, record=self._record(found.record), donor_record_id=None)

    def donor_rows(self, record_ids: Sequence[int]) -> dict[int, DonorRow]:
        mine, theirs = self._split(record_ids)
        out = self.overlay.donor_rows(mine) if mine else {}
        if theirs:
            for i, r in self.shared.donor_rows(theirs).items():
                out[i + SHARED_BASE] = replace(
                    r,
                    record_id=i + SHARED_BASE,
                    workload_id=r.workload_id + SHARED_BASE,
                    device_id=self._device_from_shared(r.device_id),
                )
        return out

    def workload_ids(self, idents: Sequence[Ident]) -> dict[Ident, int]:
        return self.overlay.workload_ids(idents)  # the overlay's only: see the module doc

    def workloads_by_id(self, ids: Sequence[int]) -> dict[int, StoredWorkload]:
        mine, theirs = self._split(ids)
        out = self.overlay.workloads_by_id(mine) if mine else {}
        if theirs:
            out.update(self._workloads(self.shared.workloads_by_id(theirs)))
        return out

    # -- one workload on one device: both, merged ----------------------------------------------------------------

    def top_k(self, workload_id: int, device_id: int, k: int) -> list[StoredRecord]:
        """Both databases' preferred records, in ``top_k``'s order (measured or verified first, then fastest); the
        overlay's first among equals."""
        mine = self.overlay.top_k(workload_id, device_id, k) if workload_id < SHARED_BASE else []
        pair = self._pair(workload_id, device_id)
        theirs = [self._record(r, workload_id) for r in self.shared.top_k(*pair, k)] if pair else []
        return sorted(mine + theirs, key=lambda r: (r.tier, r.mean_s))[:k]

    def tuning_state(self, workload_id: int, device_id: int) -> TuningState:
        """What both measured: tuning resumes from the shared registry's records too, and measures none again."""
        pair = self._pair(workload_id, device_id)
        theirs = self.shared.tuning_state(*pair) if pair else TuningState(0, {})
        if workload_id >= SHARED_BASE:
            return theirs
        mine = self.overlay.tuning_state(workload_id, device_id)
        return TuningState(mine.tuned + theirs.tuned, {**theirs.traces, **mine.traces})

    def count_records(self, device_id: int) -> int:
        shared = self._shared_device(device_id)
        mine = self.overlay.count_records(device_id) if device_id < SHARED_BASE else 0
        return mine + (self.shared.count_records(shared) if shared is not None else 0)

    @contextlib.contextmanager
    def device_records(
        self, device_id: int, *, best_only: bool = False, unsound: bool = False
    ) -> Iterator[DeviceRecords]:
        """Both databases' records of the device, the overlay's first; the shared registry's workloads under their
        shifted ids (a workload stored in both appears twice, each with its own records)."""
        shared = self._shared_device(device_id)
        with contextlib.ExitStack() as stack:
            parts = []
            if device_id < SHARED_BASE:
                found = self.overlay.device_records(device_id, best_only=best_only, unsound=unsound)
                parts.append((stack.enter_context(found), 0))
            if shared is not None:
                found = self.shared.device_records(shared, best_only=best_only, unsound=unsound)
                parts.append((stack.enter_context(found), 1))
            workloads: dict[int, StoredWorkload] = {}
            streams = []
            for found, from_shared in parts:
                if from_shared:
                    workloads.update(self._workloads(found.workloads))
                    streams.append(self._record(r) for r in found.records)
                else:
                    workloads.update(found.workloads)
                    streams.append(found.records)
            yield DeviceRecords(workloads, itertools.chain(*streams))

    def ok_record_counts(self, device_id: int) -> dict[int, tuple[str, int]]:
        shared = self._shared_device(device_id)
        out = self.overlay.ok_record_counts(device_id) if device_id < SHARED_BASE else {}
        if shared is not None:
            out.update({i + SHARED_BASE: c for i, c in self.shared.ok_record_counts(shared).items()})
        return out

    def latest_predictor(self, device_id: int, kind: str | None = None) -> StoredPredictor | None:
        """The overlay's newest predictor of the device, else the shared registry's."""
        mine = self.overlay.latest_predictor(device_id, kind) if device_id < SHARED_BASE else None
        shared = self._shared_device(device_id) if mine is None else None
        theirs = self.shared.latest_predictor(shared, kind) if shared is not None else None
        return mine or (replace(theirs, device_id=device_id) if theirs is not None else None)

    def donor_records(self, workload_ids: Sequence[int], per_device: int, target_kind: str) -> list[DonorRecord]:
        mine, theirs = self._split(workload_ids)
        out = self.overlay.donor_records(mine, per_device, target_kind) if mine else []
        for d in self.shared.donor_records(theirs, per_device, target_kind) if theirs else []:
            out.append(replace(d, record=self._record(d.record), device_id=self._device_from_shared(d.device_id)))
        return out

    # -- the similarity index: both databases' workloads ----------------------------------------------------------

    def indexed_set(self) -> IndexedSet:
        mine, theirs = self.overlay.indexed_set(), self.shared.indexed_set()
        return IndexedSet(
            mine.count + theirs.count,
            mine.id_sum + theirs.id_sum + SHARED_BASE * theirs.count,
            theirs.max_id + SHARED_BASE if theirs.count else mine.max_id,
        )

    def indexed_embeddings(self) -> list[tuple[int, bytes]]:
        theirs = [(i + SHARED_BASE, e) for i, e in self.shared.indexed_embeddings()]
        return self.overlay.indexed_embeddings() + theirs

    # -- everything else: the overlay's own, answered by it alone -------------------------------------------------

    def keep_faster(self, records: Sequence[RecordIn]) -> list[bool]:
        return self.overlay.keep_faster(records)

    def save_model(self, model: ModelIn) -> int:
        return self.overlay.save_model(model)

    def save_predictor(self, predictor: PredictorIn) -> int:
        return self.overlay.save_predictor(predictor)

    def take_task(self, workload_id: int, device_id: int, holder: str, lease_s: float) -> str | None:
        return self.overlay.take_task(workload_id, device_id, holder, lease_s)

    def renew_tasks(self, holder: str, lease_s: float) -> int:
        return self.overlay.renew_tasks(holder, lease_s)

    def save_effort(self, update: EffortUpdate) -> bool:
        return self.overlay.save_effort(update)

    def release_tasks(self, holder: str) -> int:
        return self.overlay.release_tasks(holder)

    def release_leases(self, model: str | None, may_run: Callable[[str], bool]) -> tuple[int, dict[str, int]]:
        return self.overlay.release_leases(model, may_run)

    def add_token(self, name: str, role: str, digest: str, expires_at: dt.datetime | None = None) -> None:
        self.overlay.add_token(name, role, digest, expires_at)

    def tokens(self) -> list[TokenRow]:
        return self.overlay.tokens()

    def revoke_token(self, name: str) -> bool:
        return self.overlay.revoke_token(name)

    def token(self, digest: str) -> TokenRow | None:
        return self.overlay.token(digest)

    def registry_id(self) -> str:
        return self.overlay.registry_id()

    def read_exchange(
        self, filters: ExchangeFilters, after_id: int = 0, limit: int | None = None
    ) -> AbstractContextManager[ExchangeSet]:
        return self.overlay.read_exchange(filters, after_id, limit)

    def last_synced(self, source_id: str, filters_key: str) -> int:
        return self.overlay.last_synced(source_id, filters_key)

    def count_imported(self, device_id: int, model: str | None = None) -> int:
        return self.overlay.count_imported(device_id, model)

    def imported_ids(self, device_id: int, model: str | None, limit: int | None) -> list[int]:
        return self.overlay.imported_ids(device_id, model, limit)

    def claims(self, record_ids: Sequence[int]) -> list[Claim]:
        return self.overlay.claims(record_ids)

    def record_verdicts(self, found: Sequence[Verdict], at: Any) -> None:
        self.overlay.record_verdicts(found, at)

    def all_devices(self) -> list[DeviceRow]:
        return self.overlay.all_devices()

    def resolve_devices(self, selector: str) -> list[DeviceRow]:
        return self.overlay.resolve_devices(selector)

    def resolve_one_device(self, selector: str) -> DeviceRow:
        return self.overlay.resolve_one_device(selector)

    def devices(self) -> list[DeviceListing]:
        return self.overlay.devices()

    def lookup(self, f: LookupFilter) -> list[LookupRow]:
        return self.overlay.lookup(f)

    def stats(self) -> RegistryStats:
        return self.overlay.stats()

    def newest_record_id(self) -> int:
        return self.overlay.newest_record_id()

    def list_predictors(self, device_id: int | None = None) -> list[PredictorInfo]:
        return self.overlay.list_predictors(device_id)

    def find_models(self, selector: str, sha256: str | None = None) -> list[ModelRow]:
        return self.overlay.find_models(selector, sha256)

    def model_names(self, limit: int = 10) -> list[str]:
        return self.overlay.model_names(limit)

    def plain_tasks(self) -> list[PlainTaskRow]:
        return self.overlay.plain_tasks()

    def model_tasks(self, model_id: int) -> list[TaskRow]:
        return self.overlay.model_tasks(model_id)

    def busiest_device(self, workload_ids: Sequence[int]) -> tuple[int, str] | None:
        return self.overlay.busiest_device(workload_ids)

    def record_history(self, workload_ids: Sequence[int], device_id: int) -> RecordHistory:
        return self.overlay.record_history(workload_ids, device_id)

    def coverage(self, model_id: int) -> list[DeviceCoverage]:
        return self.overlay.coverage(model_id)

    def default_latencies(self, workload_ids: Sequence[int], device_id: int) -> dict[int, float]:
        return self.overlay.default_latencies(workload_ids, device_id)

    def workload_hashes(self, workload_ids: Sequence[int]) -> dict[int, str]:
        return self.overlay.workload_hashes(workload_ids)

    def browse(self, f: BrowseFilter) -> BrowsePage:
        return self.overlay.browse(f)

    def schema_revision(self) -> str | None:
        return self.overlay.schema_revision()

    def upgrade_schema(self) -> tuple[str | None, str | None]:
        return self.overlay.upgrade_schema()

    def schema_head(self) -> str:
        return self.overlay.schema_head()

    def grant_role(self, role: str, access: str) -> RoleGrant:
        return self.overlay.grant_role(role, access)

    def grant_script(self, role: str, access: str) -> RoleGrant:
        return self.overlay.grant_script(role, access)
