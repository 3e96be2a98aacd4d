"""Plain values that come out of the store: what ``RegistryStorage``'s reads return.

They live apart from the queries that fill them so that callers (and other storage implementations) can name them
without importing SQLAlchemy or the tables. Nothing here knows TVM or SQL.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from registry.store.rows import canonical_json, utc

# -- records and workloads, as TVM needs them back ------------------------------------------------------------


@dataclass
class StoredRecord:
    """A record as TVM needs it back: enough to rebuild a ``TuningRecord`` (see registry.tvm_side)."""

    id: int
    workload_id: int
    trace_json: str
    run_secs: list[float]
    mean_s: float | None
    # 0: measured by its registry or verified there; 1: imported as claimed. Filled in by ``top_k``, whose order it
    # is the first key of, so that the answers of two registries can be merged in the same order.
    tier: int = 0
    # Why its row cannot be used (then ``trace_json`` is empty): only from ``device_records(..., unsound=True)``,
    # for ``registry check``, which marks such records.
    problem: str | None = None


@dataclass
class StoredWorkload:
    id: int
    shash: str
    module_equality: str
    mod_json: str
    args_info: list[Any]


@dataclass
class DeviceRecords:
    """A device's records with the workloads they refer to, read at one moment: a record committed while ``records``
    is streamed cannot refer to a workload missing from ``workloads``."""

    workloads: dict[int, StoredWorkload]  # by id, in id order
    records: Iterator[StoredRecord]  # in workload order; valid only while the read is open


@dataclass
class DonorRecord:
    """One of the best records of a workload, on some device: a candidate schedule for a similar workload."""

    record: StoredRecord
    device_id: int
    rank: int  # 1 for the workload's best record on that device
    task_name: str
    flops: float  # the workload's floating-point operations: with the record's mean, the rate its schedule reached
    source: str  # how the record was made: "tuned", "imported", "transferred", ...


@dataclass
class TuningState:
    """What earlier runs left for one workload on one device: what ``registry tune`` resumes from."""

    tuned: int  # records of source "tuned"
    traces: dict[str, list[float]]  # trace hash -> run_secs, for every record (failed ones too)


@dataclass
class RecordProvenance:
    """One record with where it came from: what ``registry show`` prints beside its schedule."""

    record: StoredRecord
    workload: str  # structural hash
    mod_json: str
    source: str
    donor_record_id: int | None
    donor: str | None  # "workload hash on device name" of the donor record, if it is still stored
    team: str | None
    model: str | None
    host: str | None
    tvm_version: str
    created_at: str
    device_id: int


@dataclass(frozen=True)
class IndexedSet:
    """A summary of the workloads that have good records: what the similarity index must hold. Two equal summaries
    mean (in practice) the same set, since workloads are only ever added."""

    count: int
    id_sum: int
    max_id: int


# -- models and their history: what ``registry report`` draws --------------------------------------------------


@dataclass
class ModelRow:
    id: int
    name: str
    sha256: str
    input_shapes_json: str
    created_at: dt.datetime | None


@dataclass
class TaskRow:
    workload_id: int
    task_name: str
    weight: int
    op_kind: str
    embedding: bytes


@dataclass(frozen=True)
class PlainTaskRow:
    """A kernel of a model as plain TVM extracts it (``plain_task``), by its workload's id."""

    model_id: int
    workload_id: int
    task_name: str


@dataclass
class RecordPoint:
    """One ok record: when it was written and how fast it ran."""

    id: int
    workload_id: int
    created_at: dt.datetime
    mean_s: float
    source: str
    donor_record_id: int | None


@dataclass
class RecordHistory:
    """How a set of workloads improved on a device: what a report draws, without the records that changed nothing.

    ``points``: each workload's first ok record and every later one faster than all before it, in the order they
    were written (so each workload's last point is its best record, the earliest of equals); ``counts``: ok records
    per workload; ``last_at``: when the last ok record of them all was written."""

    points: list[RecordPoint]
    counts: dict[int, int]
    last_at: dt.datetime | None


@dataclass
class DonorRow:
    record_id: int
    workload_id: int
    device_id: int
    task_name: str
    embedding: bytes


# -- predictors ------------------------------------------------------------------------------------------------


@dataclass
class PredictorInfo:
    """One stored predictor, without its blob: what ``registry predictor list`` shows."""

    id: int
    device_id: int
    device: str
    version: int
    kind: str
    tvm_version: str
    n_workloads: int
    n_records: int
    metrics: dict[str, Any]
    blob_bytes: int
    created_at: dt.datetime

    def as_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["created_at"] = self.created_at.isoformat() if self.created_at else None
        return d


def scores_at(metrics: Any, part: str) -> dict[str, float]:
    """The finite scores under ``part`` of a predictor's metrics ("held_out", "random"), by name; {} where there are
    none. What a reader prints of them: a stored row's metrics are whatever its writer put there."""
    scores = metrics.get(part) if isinstance(metrics, dict) else None
    if not isinstance(scores, dict):
        return {}
    return {k: float(v) for k, v in scores.items() if type(v) in (int, float) and math.isfinite(v)}


def unseen_top1(metrics: Any) -> dict[str, float]:
    """A predictor's top-1 score on each device it never trained on ("unseen_devices"), as ``scores_at`` reads it."""
    unseen = metrics.get("unseen_devices") if isinstance(metrics, dict) else None
    if not isinstance(unseen, dict):
        return {}
    return {name: s["top1"] for name in unseen if "top1" in (s := scores_at(unseen, name))}


@dataclass
class StoredPredictor(PredictorInfo):
    blob: bytes = b""


@dataclass(frozen=True)
class PredictorIn:
    """A trained predictor to store as its device's next version: the blob and what it was trained on."""

    device_id: int
    kind: str
    blob: bytes
    metrics: dict[str, Any]
    n_workloads: int
    n_records: int
    tvm_version: str


# -- what one registry hands another (registry.store.sql.exchange, registry.share.bundle) ----------------------------

# Records per batch of an exchange: memory stays flat for registries of millions.
CHUNK = 5000


@dataclass(frozen=True)
class ExchangeFilters:
    """Which records travel. ``device_keys`` None: every device."""

    device_keys: tuple[str, ...] | None = None
    team: str | None = None
    model: str | None = None
    since: dt.datetime | None = None  # measured at or after
    best_only: bool = False  # only the preferred record of each (workload, device)

    def described(self) -> dict[str, Any]:
        """The filters that are set, as a bundle's manifest states them."""
        return {k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in asdict(self).items() if v}

    def key(self) -> str:
        """Identifies the filter set in ``sync_state``: a sync with other filters keeps its own progress."""
        value = {k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in asdict(self).items()}
        value |= {"model_tasks": True} if self.model is not None else {}  # not the key of a --model that skipped them
        return hashlib.sha256(canonical_json(value).encode()).hexdigest()


@dataclass(frozen=True)
class ExDevice:
    key: str
    target: dict[str, Any]
    num_threads: int
    host_model: str
    tvm_version: str


@dataclass(frozen=True)
class ExWorkload:
    shash: str
    module_equality: str
    mod_json: str

    @property
    def ident(self) -> tuple[str, str]:
        return (self.shash, self.module_equality)


@dataclass(slots=True)  # not frozen: a frozen dataclass takes twice as long to build, and a sync builds 10^6
class ExRecord:
    """A record; ``workload`` and ``donor`` name the sender's workloads by (shash, module_equality). Not changed
    after it is made."""

    source_id: int  # its id in the sending registry: how far an incremental sync has got
    workload: tuple[str, str]
    device_key: str
    skeleton: str  # hash of its instruction list (ExchangeSet.skeletons)
    decisions_json: str
    run_secs: list[float]
    source: str
    origin: str
    team: str | None
    model: str | None
    host: str | None
    tool_version: str
    created_at: dt.datetime
    # (workload, device key, trace hash, origin) of the record it was transferred from
    donor: tuple[tuple[str, str], str, str, str] | None = None


@dataclass(frozen=True)
class ExModel:
    name: str
    sha256: str
    input_shapes: dict[str, list[int]]
    tasks: list[tuple[tuple[str, str], str, int]]  # (workload, task name, weight)


@dataclass(frozen=True)
class ExEffort:
    """How hard the sender's tuning runs searched a workload on a device (``task_effort``, leases left out)."""

    workload: tuple[str, str]
    device_key: str
    trials: int
    seconds: float
    curve: tuple[tuple[int, float], ...]
    plateau: bool


@dataclass(frozen=True)
class ExPredictor:
    """A device's trained predictor as it travels (``registry.tvm_side.predictor_blob``'s blob for its kind)."""

    device_key: str
    kind: str
    tvm_version: str
    n_workloads: int
    n_records: int
    metrics: dict[str, Any]
    blob: bytes
    sha256: str  # of the blob


@dataclass
class ExchangeSet:
    """Everything but the records, which stream (``records``): small enough to hold, needed before any record."""

    origin: str  # the sending registry's id
    devices: list[ExDevice] = field(default_factory=list)
    workloads: list[ExWorkload] = field(default_factory=list)
    skeletons: dict[str, str] = field(default_factory=dict)  # hash -> instructions' canonical JSON
    models: list[ExModel] = field(default_factory=list)
    efforts: list[ExEffort] = field(default_factory=list)  # of the (workload, device) pairs it holds
    n_records: int = 0
    last_record_id: int = 0  # the highest record id in the set: where the next incremental sync starts
    # The records in batches, read from the start on each call (a write that lost a lock race starts over).
    records: Callable[[], Iterator[list[ExRecord]]] = lambda: iter(())
    # Its devices' predictors, one at a time (each holds a blob of up to tens of MB), read from the start on each call
    predictors: Callable[[], Iterator[ExPredictor]] = lambda: iter(())


# -- registry verify (registry.store.sql.verdicts) -------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """An imported record as verify needs it: what it claims, and the trace to rebuild it from."""

    record_id: int
    workload_id: int
    device_id: int
    shash: str
    task_name: str
    trace: list
    mean_s: float  # the claimed mean latency
    best: bool  # whether it is its pair's best_record now


@dataclass(frozen=True)
class Verdict:
    record_id: int
    workload_id: int
    device_id: int
    trust: str  # "verified" or "disputed"
    measured_s: float | None  # the mean measured here; None when it did not build or run


# -- tokens of `registry serve` (registry.store.sql.tokens) -----------------------------------------------------------

# Who may do what over HTTP: a reader every GET, a writer also a POST of a bundle, an admin also the token list. The
# same three as a shared PostgreSQL registry's roles (docs/SHARING.md): reader, writer, owner.
ROLES = ("reader", "writer", "admin")


# What `registry db grant` makes a PostgreSQL role of a registry (docs/SHARING.md): no role may change the schema.
READ_ONLY = "read-only"
WRITER = "writer"
ACCESS = (READ_ONLY, WRITER)


@dataclass(frozen=True)
class RoleGrant:
    """A role made a ``READ_ONLY`` or ``WRITER`` user of a registry: where (its database, schema and the role owning its
    tables; None for a script the owner runs) and the SQL that did it, or the psql script that will."""

    database: str
    schema: str
    owner: str | None
    sql: str


@dataclass(frozen=True)
class TokenRow:
    """A token as the store keeps it: never the token, only its name, role and times (``expires_at``
    None: never)."""

    name: str
    role: str
    created_at: dt.datetime | None
    revoked_at: dt.datetime | None
    expires_at: dt.datetime | None = None

    def may(self, role: str) -> bool:
        """Whether this token's role includes ``role`` (an admin may all a writer may, a writer all a reader may)."""
        return self.revoked_at is None and ROLES.index(self.role) >= ROLES.index(role)

    def expired(self, now: dt.datetime) -> bool:
        """Whether the token's time ran out by ``now`` (an aware UTC time)."""
        return self.expires_at is not None and utc(self.expires_at) <= now


@dataclass(frozen=True)
class Effort:
    """How hard a workload was searched on a device, over every tuning run that recorded it, and who tunes it now."""

    trials: int  # measured candidates
    seconds: float  # wall time of the runs' batches on it
    curve: tuple[tuple[int, float], ...]  # (trials so far, best µs then), one point per batch
    plateau: bool  # the last trials gained too little to search on (registry.pipeline.effort)
    holder: str | None = None  # the run holding its lease (None: released)
    lease_until: dt.datetime | None = None  # UTC

    @property
    def best_us(self) -> float | None:
        return self.curve[-1][1] if self.curve else None

    def held_by_other(self, holder: str, now: dt.datetime) -> str | None:
        """The run that holds this task now if it is not ``holder``, else None."""
        if self.holder is None or self.holder == holder or self.lease_until is None:
            return None
        return self.holder if self.lease_until > now else None


NO_EFFORT = Effort(0, 0.0, (), False)


@dataclass(frozen=True)
class EffortUpdate:
    """What a tuning run adds to a task's effort after a batch: ``added`` (trials, seconds), the best-latency
    ``curve`` and ``plateau`` as they stand now, and the lease: renewed for ``lease_s`` seconds, or released (None)."""

    workload_id: int
    device_id: int
    holder: str
    added: tuple[int, float]
    curve: Sequence[tuple[int, float]]
    plateau: bool
    lease_s: float | None


# The holder of an effort another registry sent: its claim, never a run of this one (those are host:pid:random).
IMPORTED_EFFORT = "imported"


# -- devices and lookup (registry/store/sql/lookup.py answers with these) ----------------------------------------


@dataclass(frozen=True)
class DeviceRow:
    id: int
    name: str
    host_model: str
    tvm_version: str
    target_json: str
    key: str
    num_threads: int


@dataclass(frozen=True)
class DeviceListing:
    """A device with its record count: what ``registry devices`` lists."""

    id: int
    name: str
    kind: str
    mcpu: str | None
    num_cores: int | None
    threads: int
    host_model: str
    tvm_version: str
    records: int  # failed ones included
    target: Any  # the full TVM target as JSON; None where the row holds no JSON (a listing must not fail on one row)


@dataclass(frozen=True)
class TunedOnDevice:
    """How much of a device's tuning the registry holds: its (workload, device) pairs with a best record and their
    ok records."""

    id: int
    name: str
    tuned_workloads: int
    ok_records: int


@dataclass(frozen=True)
class TeamArrivals:
    """The records tagged with one team (None: untagged) and when the newest of them arrived (ISO 8601, UTC)."""

    team: str | None
    records: int
    last_at: str | None


@dataclass(frozen=True)
class RegistryStats:
    """Counts of what the registry holds: what ``registry stats`` prints."""

    devices: int
    workloads: int
    records: int
    records_ok: int
    models: int
    records_by_source: dict[str, int]
    workloads_by_op: dict[str, int]  # the most common operator first
    per_device: tuple[TunedOnDevice, ...]  # by device id
    by_team: tuple[TeamArrivals, ...]  # the team whose records arrived last first, at most 20


@dataclass
class LookupFilter:
    op: str | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    device_ids: list[int] | None = None
    model: str | None = None
    workload: str | None = None
    top_k: int = 1
    limit: int = 100
    trust: str = "imported"  # the least trusted records shown: "verified" (measured here or verified) or "imported"
    offset: int = 0  # (workload, device) pairs skipped, in the order they are chosen: the API's paging


@dataclass
class LookupRow:
    workload: str
    op: str
    task: str
    args: list[dict[str, Any]]
    flops: float
    device_id: int
    device: str
    threads: int
    rank: int
    record_id: int
    latency_us: float
    gflops: float
    records: int
    source: str
    team: str | None
    model: str | None
    created_at: str
    trust: str  # measured (here), imported, verified, disputed
    origin: str  # the id of the registry that measured it, or "tvm-log"
    verified_latency_us: float | None  # what `registry verify` measured here, beside the claimed latency_us
    # how hard `registry tune` runs searched this workload on this device (None: no run recorded its effort)
    effort_trials: int | None = None
    effort_s: float | None = None
    plateau: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the web view's reads (``Browsing``) -------------------------------------------------------------------------

BROWSE_SORTS = ("operator", "latency", "newest", "team", "device")  # how a page of lookup rows may be ordered


@dataclass(frozen=True)
class DeviceCoverage:
    """What one device holds of a model: its tasks with an ok best record there, their ok records, and the model's
    estimate over those tasks (Σ weight x best, µs)."""

    device_id: int
    device: str
    tasks: int  # of the model's tasks, those with an ok record on the device
    records: int  # ok records of those tasks on the device
    estimate_us: float


@dataclass
class BrowseFilter(LookupFilter):
    """A page of the web view's search: the lookup's filters (each pair's best record: ``top_k`` is not read), a
    team and a time (pairs with a record of the team, written at or after), an order of ``BROWSE_SORTS`` and a window
    (``offset``, ``limit``)."""

    team: str | None = None
    since: dt.datetime | None = None
    sort: str = "operator"
    offset: int = 0


@dataclass
class BrowsePage:
    """One page of (workload, device) pairs and how many match in all."""

    rows: list[LookupRow]
    total: int
