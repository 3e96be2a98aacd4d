"""``RegistryStorage``: the one interface through which the rest of the registry reads and writes its data.

The pipeline, tuning, similarity, export, report and CLI ask the storage questions, one method each, and get plain
values back (``registry.store.values``, ``.rows``, ``.lookup``); none of them opens a session or imports the tables,
queries or ingest code of ``registry.store`` (``tests/test_storage_interface.py`` holds them to it). ``Store``, over
SQLite or PostgreSQL, is the implementation; ``open_storage`` picks it by URL.

This module imports neither SQLAlchemy nor TVM, so naming the interface and its values costs nothing. The fastest
read, ``registry lookup``, does not even open a ``Store``: it runs ``registry.store.sql.lookup`` over a plain DB-API
connection when it can (see ``lookup.connect``), the same code ``RegistryStorage.lookup`` runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from registry.config import resolve_database_url
from registry.errors import DatabaseError
from registry.store.rows import DeviceSpec, IngestExtras, IngestResult, RecordIn, Signature, WorkloadIn
from registry.store.validation import Problem
from registry.store.values import (
    Claim,
    DeviceRecords,
    DeviceRow,
    DonorRecord,
    DonorRow,
    Effort,
    ExchangeFilters,
    ExchangeSet,
    IndexedSet,
    LookupFilter,
    LookupRow,
    ModelRow,
    PlainTask,
    PredictorInfo,
    RecordHistory,
    RecordPoint,
    RecordProvenance,
    StoredPredictor,
    StoredRecord,
    StoredWorkload,
    TaskRow,
    TokenRow,
    TuningState,
    Verdict,
)

__all__ = [
    "DeviceRecords",
    "DeviceRow",
    "DeviceSpec",
    "DonorRecord",
    "DonorRow",
    "Effort",
    "IndexedSet",
    "IngestResult",
    "LookupFilter",
    "LookupRow",
    "ModelRow",
    "PredictorInfo",
    "RecordIn",
    "RecordHistory",
    "RecordPoint",
    "RecordProvenance",
    "RecordReads",
    "RegistryStorage",
    "Signature",
    "StoredPredictor",
    "StoredRecord",
    "StoredWorkload",
    "PlainTask",
    "TaskRow",
    "TokenRow",
    "TuningState",
    "WorkloadIn",
    "open_storage",
    "record_trace_hash",
]

Ident = tuple[str, str]  # a workload's (structural hash, module equality)


class RecordReads(Protocol):
    """The reads that give a compilation or a tuning run its workloads and records back: the part of a storage that
    two stores stacked (``registry.share.overlay``) answer together, each reply merged from both, as TVM's
    ``OrderedUnionDatabase`` merges its databases' answers. Everything else a storage does (writes, tokens, sync
    progress, verify, schema, lookup, models and their history) belongs to one store alone."""

    # -- workloads and records, as TVM needs them back --------------------------------------------------------------

    def workload_ids(self, idents: Sequence[Ident]) -> dict[Ident, int]:
        """The ids of those of these workloads that are stored."""

    def workloads_by_id(self, ids: Sequence[int]) -> dict[int, StoredWorkload]:
        """These workloads, with their modules."""

    def top_k(self, workload_id: int, device_id: int, k: int) -> list[StoredRecord]:
        """The ``k`` fastest ok records of a workload on a device, fastest first."""

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


class RegistryStorage(RecordReads, Protocol):
    """A registry database. Every write is one transaction, all of it or nothing; ids are the database's own. Its
    reads of workloads and records are ``RecordReads``'s."""

    url: str  # the database URL, with its password: show it through ``registry.store.sql.engine.redact``

    trust: str  # which records reads for compilation and tuning accept (registry.store.sql.trust)

    def close(self) -> None:
        """Release the connections."""

    # -- sharing ------------------------------------------------------------------------------------------------

    def registry_id(self) -> str:
        """This registry's id: the origin stamped on the records it measures."""

    def read_exchange(
        self, filters: ExchangeFilters, after_id: int = 0, limit: int | None = None
    ) -> AbstractContextManager[ExchangeSet]:
        """The records matching ``filters`` with ids above ``after_id`` (the ``limit`` lowest ids of them, if
        given), with their workloads, devices, models and instruction lists, read in one snapshot
        (``registry.store.sql.exchange``)."""

    def last_synced(self, source_id: str, filters_key: str) -> int:
        """How far syncs from ``source_id`` with these filters have copied (its highest record id; 0: never)."""

    # -- the tokens of `registry serve` (registry.server.auth): their hashes, never the tokens -------------------

    def add_token(self, name: str, role: str, digest: str, expires_at: dt.datetime | None = None) -> None:
        """Store a new token's sha256 ``digest`` under a unique ``name`` with a role of ``ROLES``, admitted until
        ``expires_at`` (None: until revoked)."""

    def tokens(self) -> list[TokenRow]:
        """Every token, revoked ones included, in the order they were made."""

    def revoke_token(self, name: str) -> bool:
        """Revoke the token of this name; False when there is no such token not yet revoked."""

    def token(self, digest: str) -> TokenRow | None:
        """The token whose sha256 is ``digest``, revoked or not; None when there is none."""

    # -- effort and leases of tuning runs (registry.pipeline.effort) ---------------------------------------------

    def efforts(self, workload_ids: Sequence[int], device_id: int) -> dict[int, Effort]:
        """The effort recorded for each of these workloads on a device (those with none are left out)."""

    def take_task(self, workload_id: int, device_id: int, holder: str, lease_s: float) -> str | None:
        """Take or renew the lease on tuning a workload on a device for ``lease_s`` seconds: None when ``holder`` has
        it now, else the name of the run that holds it."""

    def renew_tasks(self, holder: str, lease_s: float) -> int:
        """Extend every lease ``holder`` holds by ``lease_s`` seconds from now; how many it holds."""

    def save_effort(
        self,
        workload_id: int,
        device_id: int,
        holder: str,
        added: tuple[int, float],
        curve: Sequence[tuple[int, float]],
        plateau: bool,
        lease_s: float | None,
    ) -> bool:
        """Add ``added`` (trials, seconds) to a task's effort, set its best-latency ``curve`` and ``plateau``, and
        renew its lease (``lease_s``) or release it (None); False, with nothing written, when ``holder`` no longer
        holds the lease (it expired and another run took it)."""

    def release_tasks(self, holder: str) -> int:
        """Release every lease ``holder`` holds (a run's end); how many."""

    # -- writes -------------------------------------------------------------------------------------------------

    def ingest(
        self,
        workloads: Sequence[WorkloadIn],
        records: Sequence[RecordIn],
        *,
        check: Callable[[Sequence[RecordIn]], list[Problem | None]] | None = None,
    ) -> IngestResult:
        """Add workloads and records, checked first (one invalid record refuses them all); those already present are
        counted, not duplicated."""

    def ingest_batches(
        self,
        workloads: Sequence[WorkloadIn],
        batches: Callable[[], Iterable[Sequence[RecordIn]]],
        extras: IngestExtras | None = None,
    ) -> IngestResult:
        """Add workloads and every batch of records ``batches()`` yields, unchecked, in one transaction, then
        ``extras`` (a bundle's or a sync's models, donor links and progress); ``batches`` may be called again from
        the start, and anything it raises leaves the database as it was."""

    def keep_faster(self, records: Sequence[RecordIn]) -> list[bool]:
        """Records measured here (no origin) that ``ingest`` found already stored: where one's measurement is faster
        (lower mean, or ok where the stored one failed) it replaces the stored latencies and the pair's best record
        follows; True per record that replaced one (``RecordWriter(..., faster_replaces=True)``)."""

    def record_model(
        self,
        name: str,
        sha256: str,
        input_shapes: dict[str, list[int]],
        tasks: Sequence[tuple[WorkloadIn, str, int]],
        plain: Sequence[tuple[WorkloadIn, str, int]] = (),
    ) -> int:
        """Record a model and its tasks as (workload, task name, weight), adding new workloads; returns its id.
        ``plain``: its kernels as plain TVM extracts them, where they differ from ``tasks`` (``PlainTask``)."""

    def device_id(self, spec: DeviceSpec) -> int:
        """The id of a device, added if new."""

    def save_predictor(
        self,
        device_id: int,
        kind: str,
        blob: bytes,
        metrics: dict[str, Any],
        n_workloads: int,
        n_records: int,
        tvm_version: str,
    ) -> int:
        """Store a predictor as the device's next version; returns that version."""

    # -- registry verify ----------------------------------------------------------------------------------------

    def count_imported(self, device_id: int, model: str | None = None) -> int:
        """The imported ok records of a device (and model)."""

    def imported_ids(self, device_id: int, model: str | None, limit: int | None) -> list[int]:
        """Ids of a device's imported records to re-measure, each pair's best first, then the fastest."""

    def claims(self, record_ids: Sequence[int]) -> list[Claim]:
        """What those records claim, with their traces."""

    def record_verdicts(self, found: Sequence[Verdict], at: Any) -> None:
        """Mark records verified or disputed with the latency measured here; their pairs' best records follow."""

    # -- schema -------------------------------------------------------------------------------------------------

    def schema_revision(self) -> str | None:
        """The database's schema revision; None for an empty database."""

    def upgrade_schema(self) -> tuple[str | None, str | None]:
        """Migrate to this registry's schema; returns the revisions before and after."""

    # -- devices and lookup (no TVM) -------------------------------------------------------------------------------

    def all_devices(self) -> list[DeviceRow]:
        """Every device, by id."""

    def resolve_devices(self, selector: str) -> list[DeviceRow]:
        """Devices matching ``host``, an id or a name; UnknownDeviceError when none does."""

    def resolve_one_device(self, selector: str) -> DeviceRow:
        """The one device a selector names; UnknownDeviceError when it names none or several."""

    def devices(self) -> list[dict]:
        """Every device with its target and record count, as ``registry devices`` prints them."""

    def lookup(self, f: LookupFilter) -> list[LookupRow]:
        """The best records of each (workload, device) matching the filter."""

    def stats(self) -> dict:
        """Counts of what the registry holds, as ``registry stats`` prints them."""

    def newest_record_id(self) -> int:
        """The highest record id (0: none): records are only ever added, so what is derived from them (a model
        page) is current while it stays the same."""

    def list_predictors(self, device_id: int | None = None) -> list[PredictorInfo]:
        """Every predictor (of one device), without blobs, by device and version."""

    # -- models and their history (``registry report``) --------------------------------------------------------------

    def find_models(self, selector: str, sha256: str | None = None) -> list[ModelRow]:
        """Models with this name (or id), and ``sha256`` if given, newest first."""

    def model_names(self, limit: int = 10) -> list[str]:
        """The names of the most recently recorded models."""

    def plain_tasks(self) -> list[PlainTask]:
        """Every model's kernels as plain TVM extracts them, where they differ from the registry's own."""

    def model_tasks(self, model_id: int) -> list[TaskRow]:
        """A model's tasks, with their workloads' operator kind and embedding."""

    def busiest_device(self, workload_ids: Sequence[int]) -> tuple[int, str] | None:
        """The device (id, name) with the most ok records of these workloads; None when none has any."""

    def record_history(self, workload_ids: Sequence[int], device_id: int) -> RecordHistory:
        """How these workloads improved on a device: each one's improving ok records, in the order they were
        written, and its count of ok records (``RecordHistory``)."""


# The URL schemes (before any "+driver") of the databases the SQL implementation keeps a registry in.
SQL_SCHEMES = ("sqlite", "postgresql")


def open_storage(
    url: str | None = None, *, check_schema: bool = True, create_new: bool = True, trust: str = "imported"
) -> RegistryStorage:
    """The storage at ``url`` (default: ``$REGISTRY_DATABASE_URL``, else the per-user SQLite file; a plain path is an
    SQLite file), by its scheme. Raises DatabaseError, in one line, for a scheme no implementation speaks.

    ``check_schema``, ``create_new`` and ``trust`` as ``Store`` takes them.
    """
    resolved = resolve_database_url(url)
    scheme = resolved.split(":", 1)[0].split("+", 1)[0].lower()
    if "://" in resolved and scheme not in SQL_SCHEMES:
        from registry.store.sql.engine import redact

        raise DatabaseError(
            f"cannot use database {redact(resolved)}: the registry keeps its data in SQLite (sqlite:///FILE) or "
            f"PostgreSQL (postgresql://...), not {scheme}"
        )
    from registry.store.sql.store import Store  # SQLAlchemy, only once a database is opened

    return Store(resolved, check_schema=check_schema, create_new=create_new, trust=trust)


def record_trace_hash(trace: Any) -> str:
    """The key ``TuningState.traces`` files a record of this trace JSON (``[instructions, decisions]``) under."""
    from registry.store.sql.ingest import record_trace_hash as key  # SQLAlchemy: by now a storage is open anyway

    return key(trace)
