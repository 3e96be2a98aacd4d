"""The storage protocols: the interfaces through which the rest of the registry reads and writes its data, one per
concern (records read, records written, leases, tokens, sharing, verification, the catalogue, administration), and
``RegistryStorage``, all of them together.

The pipeline, tuning, similarity, export, report and CLI ask the storage questions, one method each, and get plain
values back (``registry.store.values``, ``.rows``); each depends on the narrowest protocol it needs, and none opens a
session or imports the tables, queries or ingest code of ``registry.store.sql`` (``tests/test_storage_interface.py``
holds them to it). ``Store``, over SQLite or PostgreSQL, implements every protocol; ``registry.store.factory`` opens
it by URL.

This module imports neither SQLAlchemy nor TVM, so naming the interface and its values costs nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from registry.store.rows import DeviceSpec, IngestExtras, IngestResult, ModelIn, RecordIn, Signature, WorkloadIn
from registry.store.validation import Problem
from registry.store.values import (
    BrowseFilter,
    BrowsePage,
    Claim,
    DeviceCoverage,
    DeviceListing,
    DeviceRecords,
    DeviceRow,
    DonorRecord,
    DonorRow,
    Effort,
    EffortUpdate,
    ExchangeFilters,
    ExchangeSet,
    IndexedSet,
    LookupFilter,
    LookupRow,
    ModelRow,
    PlainTaskRow,
    PredictorIn,
    PredictorInfo,
    RecordHistory,
    RecordPoint,
    RecordProvenance,
    RegistryStats,
    RoleGrant,
    StoredPredictor,
    StoredRecord,
    StoredWorkload,
    TaskRow,
    TokenRow,
    TuningState,
    Verdict,
)

__all__ = [
    "Administration",
    "BrowseFilter",
    "BrowsePage",
    "Browsing",
    "DeviceCoverage",
    "Catalogue",
    "DeviceListing",
    "DeviceRecords",
    "DeviceRow",
    "DeviceSpec",
    "DonorRecord",
    "DonorRow",
    "Effort",
    "EffortUpdate",
    "IndexedSet",
    "IngestResult",
    "LeaseStorage",
    "LookupFilter",
    "LookupRow",
    "ModelIn",
    "ModelRow",
    "PredictorIn",
    "PredictorInfo",
    "RecordIn",
    "RecordHistory",
    "RecordPoint",
    "RecordProvenance",
    "RecordReads",
    "RecordStorage",
    "RecordWrites",
    "RegistryReads",
    "RegistryStats",
    "RegistryStorage",
    "ReportReads",
    "RoleGrant",
    "Sharing",
    "Signature",
    "StoredPredictor",
    "StoredRecord",
    "StoredWorkload",
    "PlainTaskRow",
    "TaskRow",
    "TokenRow",
    "Tokens",
    "TuningState",
    "Verification",
    "WorkloadIn",
]

Ident = tuple[str, str]  # a workload's (structural hash, module equality)
Workloads = Sequence[WorkloadIn]
Check = Callable[[Sequence[RecordIn]], list[Problem | None]] | None  # records -> each one's problem (None: none)
Batches = Callable[[], Iterable[Sequence[RecordIn]]]  # yields the batches of records, again from the start per call
Extras = IngestExtras | None

# A caller depends on the narrowest of these it needs; ``RegistryStorage`` is all of them, for the factory and the
# commands that use many. No protocol has more than 15 methods (tests/test_storage_protocols.py).


class RecordReads(Protocol):
    """The reads that give a compilation or a tuning run its workloads and records back: the part of a storage that
    two stores stacked (``registry.share.overlay``) answer together, each reply merged from both, as TVM's
    ``OrderedUnionDatabase`` merges its databases' answers."""

    # -- workloads and records, as TVM needs them back --------------------------------------------------------------

    def workload_ids(self, idents: Sequence[Ident]) -> dict[Ident, int]:
        """The ids of those of these workloads that are stored."""

    def workloads_by_id(self, ids: Sequence[int]) -> dict[int, StoredWorkload]:
        """These workloads, with their modules."""

    def top_k(self, workload_id: int, device_id: int, k: int) -> list[StoredRecord]:
        """The ``k`` fastest ok records of a workload on a device that the storage's trust accepts, fastest first."""

    def count_records(self, device_id: int) -> int:
        """How many records a device has, failed ones included."""

    def device_records(
        self, device_id: int, *, best_only: bool = False, unsound: bool = False
    ) -> AbstractContextManager[DeviceRecords]:
        """A device's records (or each workload's best) with their workloads, as of one moment. A record whose row
        cannot be used (registry.store.decode) is left out with a warning, or with ``unsound`` handed out with its
        ``problem``."""

    def tuning_state(self, workload_id: int, device_id: int) -> TuningState:
        """What earlier runs measured of a workload on a device: what tuning resumes from."""

    def donor_records(self, workload_ids: Sequence[int], per_device: int, target_kind: str) -> list[DonorRecord]:
        """The ``per_device`` best records of each workload on each device of a target kind."""

    def ok_record_counts(self, device_id: int) -> dict[int, tuple[str, int]]:
        """Workload id -> (task name, ok records) for every workload with ok records on a device."""

    def latest_predictor(self, device_id: int, kind: str | None = None) -> StoredPredictor | None:
        """The device's newest predictor (of ``kind``), blob included; None when it has none."""

    def record_provenance(self, record_id: int) -> RecordProvenance:
        """A record with its trace, workload module and provenance."""

    def donor_rows(self, record_ids: Sequence[int]) -> dict[int, DonorRow]:
        """Records by id, with their workload's task name and embedding: the donors a report names."""

    # -- the similarity index ----------------------------------------------------------------------------------------

    def indexed_set(self) -> IndexedSet:
        """A summary of the workloads with good records: what the similarity index must hold."""

    def indexed_embeddings(self) -> list[tuple[int, bytes]]:
        """(workload id, float32 embedding bytes) of every workload with good records, by id."""


class RecordWrites(Protocol):
    """What a model run, an import or a training writes. Every write is one transaction, all of it or nothing; ids are
    the database's own."""

    def ingest(self, workloads: Workloads, records: Sequence[RecordIn], *, check: Check = None) -> IngestResult:
        """Add workloads and records, checked first (one invalid record refuses them all); those already present are
        counted, not duplicated."""

    def ingest_batches(self, workloads: Workloads, batches: Batches, extras: Extras = None) -> IngestResult:
        """Add workloads and every batch of records ``batches()`` yields, unchecked, in one transaction, then
        ``extras`` (a bundle's or a sync's models, donor links and progress); ``batches`` may be called again from
        the start, and anything it raises leaves the database as it was."""

    def keep_faster(self, records: Sequence[RecordIn]) -> list[bool]:
        """Records measured here (no origin) that ``ingest`` found already stored: where one's measurement is faster
        (lower mean, or ok where the stored one failed) it replaces the stored latencies and the pair's best record
        follows; True per record that replaced one (``RecordWriter(..., faster_replaces=True)``)."""

    def save_model(self, model: ModelIn) -> int:
        """Store a model and its tasks, adding new workloads; returns its id."""

    def add_device(self, spec: DeviceSpec) -> int:
        """The id of a device, added if new."""

    def save_predictor(self, predictor: PredictorIn) -> int:
        """Store a predictor as its device's next version; returns that version."""


class LeaseStorage(Protocol):
    """Effort and leases of tuning runs (registry.pipeline.effort): which run tunes a task, and how hard it was
    searched."""

    def efforts(self, workload_ids: Sequence[int], device_id: int) -> dict[int, Effort]:
        """The effort recorded for each of these workloads on a device (those with none are left out)."""

    def take_task(self, workload_id: int, device_id: int, holder: str, lease_s: float) -> str | None:
        """Take or renew the lease on tuning a workload on a device for ``lease_s`` seconds: None when ``holder`` has
        it now, else the name of the run that holds it."""

    def renew_tasks(self, holder: str, lease_s: float) -> int:
        """Extend every lease ``holder`` holds by ``lease_s`` seconds from now; how many it holds."""

    def save_effort(self, update: EffortUpdate) -> bool:
        """Add a batch's trials and seconds to a task's effort, set its curve and plateau, and renew or release its
        lease; False, with nothing written, when ``update.holder`` no longer holds the lease (it expired and another
        run took it)."""

    def release_tasks(self, holder: str) -> int:
        """Release every lease ``holder`` holds (a run's end); how many."""

    def release_leases(self, model: str | None, may_run: Callable[[str], bool]) -> tuple[int, dict[str, int]]:
        """Release the leases of runs that have ended (of ``model``'s tasks, if given): expired ones, ones longer than
        a lease may be, and those whose holder ``may_run`` says is not running. Returns how many were released and,
        by holder, the leases left to runs that may still be running (`registry db release-leases`)."""


class Tokens(Protocol):
    """The tokens of `registry serve` (registry.server.auth): their hashes, never the tokens."""

    def add_token(self, name: str, role: str, digest: str, expires_at: dt.datetime | None = None) -> None:
        """Store a new token's sha256 ``digest`` under a unique ``name`` with a role of ``ROLES``, admitted until
        ``expires_at`` (None: until revoked)."""

    def tokens(self) -> list[TokenRow]:
        """Every token, revoked ones included, in the order they were made."""

    def revoke_token(self, name: str) -> bool:
        """Revoke the token of this name; False when there is no such token not yet revoked."""

    def token(self, digest: str) -> TokenRow | None:
        """The token whose sha256 is ``digest``, revoked or not; None when there is none."""


class Sharing(Protocol):
    """What `registry sync`, bundles and the server exchange: the registry's identity, its records as exchange sets,
    and how far syncs from elsewhere have copied."""

    def registry_id(self) -> str:
        """This registry's id: the origin stamped on the records it measures."""

    def read_exchange(
        self, filters: ExchangeFilters, after_id: int = 0, limit: int | None = None
    ) -> AbstractContextManager[ExchangeSet]:
        """The records matching ``filters`` with ids above ``after_id`` (the ``limit`` lowest ids of them, if
        given), with their workloads, devices, models and instruction lists, read in one snapshot."""

    def last_synced(self, source_id: str, filters_key: str) -> int:
        """How far syncs from ``source_id`` with these filters have copied (its highest record id; 0: never)."""


class Verification(Protocol):
    """`registry verify`: imported records to measure again here, and the verdicts."""

    def count_imported(self, device_id: int, model: str | None = None) -> int:
        """The imported ok records of a device (and model)."""

    def imported_ids(self, device_id: int, model: str | None, limit: int | None) -> list[int]:
        """Ids of a device's imported records to re-measure, each pair's best first, then the fastest."""

    def claims(self, record_ids: Sequence[int]) -> list[Claim]:
        """What those records claim, with their traces."""

    def record_verdicts(self, found: Sequence[Verdict], at: Any) -> None:
        """Mark records verified or disputed with the latency measured here; their pairs' best records follow."""


class Catalogue(Protocol):
    """What the registry holds, as plain values for display (no TVM): devices, lookup, counts, predictors, models and
    their history (``registry report``)."""

    def all_devices(self) -> list[DeviceRow]:
        """Every device, by id."""

    def resolve_devices(self, selector: str) -> list[DeviceRow]:
        """Devices matching ``host``, an id or a name; UnknownDeviceError when none does."""

    def resolve_one_device(self, selector: str) -> DeviceRow:
        """The one device a selector names; UnknownDeviceError when it names none or several."""

    def devices(self) -> list[DeviceListing]:
        """Every device with its target and record count, as ``registry devices`` prints them."""

    def lookup(self, f: LookupFilter) -> list[LookupRow]:
        """The best records of each (workload, device) matching the filter."""

    def stats(self) -> RegistryStats:
        """Counts of what the registry holds, as ``registry stats`` prints them."""

    def newest_record_id(self) -> int:
        """The highest record id (0: none): records are only ever added, so what is derived from them (a model
        page) is current while it stays the same."""

    def list_predictors(self, device_id: int | None = None) -> list[PredictorInfo]:
        """Every predictor (of one device), without blobs, by device and version."""

    def find_models(self, selector: str, sha256: str | None = None) -> list[ModelRow]:
        """Models with this name (or id), and ``sha256`` if given, newest first."""

    def model_names(self, limit: int = 10) -> list[str]:
        """The names of the most recently recorded models."""

    def plain_tasks(self) -> list[PlainTaskRow]:
        """Every model's kernels as plain TVM extracts them, where they differ from the registry's own."""

    def model_tasks(self, model_id: int) -> list[TaskRow]:
        """A model's tasks, with their workloads' operator kind and embedding."""

    def busiest_device(self, workload_ids: Sequence[int]) -> tuple[int, str] | None:
        """The device (id, name) with the most ok records of these workloads; None when none has any."""

    def record_history(self, workload_ids: Sequence[int], device_id: int) -> RecordHistory:
        """How these workloads improved on a device: each one's improving ok records, in the order they were
        written, and its count of ok records (``RecordHistory``)."""


class Browsing(Protocol):
    """What the web view reads beyond the catalogue (``registry.server.pages``): a model's coverage per device, the
    default schedules' timings, workloads' hashes, and the search as pages with a total."""

    def coverage(self, model_id: int) -> list[DeviceCoverage]:
        """Each device holding ok records of the model's tasks, the most records first: tasks covered, records and
        the model's estimate over them."""

    def default_latencies(self, workload_ids: Sequence[int], device_id: int) -> dict[int, float]:
        """Workload id -> µs of TVM's default schedule on a device, for those where a record of it is stored."""

    def workload_hashes(self, workload_ids: Sequence[int]) -> dict[int, str]:
        """Workload id -> structural hash, for links to the workloads' pages."""

    def browse(self, f: BrowseFilter) -> BrowsePage:
        """One page (``f.offset``, ``f.limit``) of the best record of each (workload, device) matching ``f``, in
        ``f.sort`` order, with how many match in all."""


class Administration(Protocol):
    """The database behind the registry: where it is, its schema and who may use it."""

    url: str  # the database URL, with its password: show it through ``redact``

    def close(self) -> None:
        """Release the connections."""

    def schema_revision(self) -> str | None:
        """The database's schema revision; None for an empty database."""

    def upgrade_schema(self) -> tuple[str | None, str | None]:
        """Migrate to this registry's schema; returns the revisions before and after."""

    def schema_head(self) -> str:
        """The schema revision this registry reads and writes (what ``upgrade_schema`` migrates to)."""

    def grant_role(self, role: str, access: str) -> RoleGrant:
        """Make a database role exactly an ``access`` (``READ_ONLY`` or ``WRITER``) user of the registry, run by the
        owner of its tables; refused, with nothing changed, by any other role."""

    def grant_script(self, role: str, access: str) -> RoleGrant:
        """The statements ``grant_role`` would run, for the owner to run instead; connects to nothing."""


# -- the pairs several callers need together (each adds no method of its own) ------------------------------------


class RecordStorage(RecordReads, RecordWrites, Protocol):
    """Records read and written: what an import and a record writer (``registry.records.write``) need."""


class RegistryReads(RecordReads, Catalogue, Protocol):
    """Records and the catalogue, read: what an export and a predictor's training need."""


class ReportReads(RecordReads, Catalogue, LeaseStorage, Browsing, Protocol):
    """What a model's report reads: its tasks and their history (the catalogue), donors (records) and efforts."""


class RegistryStorage(
    RecordReads,
    RecordWrites,
    LeaseStorage,
    Tokens,
    Sharing,
    Verification,
    Catalogue,
    Browsing,
    Administration,
    Protocol,
):
    """A registry database: every concern of a storage, for the factory and the commands that use many of them.
    Everything else takes the narrowest protocol above that it needs."""
