"""SQLAlchemy 2 models of the registry: the single source of truth.

Nothing here imports TVM. The TVM-facing code turns TVM objects into these rows (``registry.tvm_side``), and the
similarity index is a cache rebuilt from them.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.sql import expression

from registry.store.rows import (
    LOG_ORIGIN,  # noqa: F401 - the origin column's value for TVM logs, named here too
    SOURCES,
)
from registry.store.trust import TRUST_LEVELS

# Stable constraint names, so that Alembic's batch mode (SQLite) and PostgreSQL agree on what to alter.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL needs 64 bits for a large registry.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def _one_of(column: str, values: tuple[str, ...]) -> str:
    """A CHECK constraint's condition: ``column`` holds one of ``values``."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


# Times are set by the database (CURRENT_TIMESTAMP, UTC on SQLite), not per row in Python: cheaper on bulk import.


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Device(Base):
    """One distinct place where latencies were measured.

    Two measurements are comparable only if target, runtime thread count, hardware and TVM version all agree, so all
    four are the identity. ``key`` is a digest of them, which keeps the unique index small.
    """

    __tablename__ = "device"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    target_json: Mapped[str] = mapped_column(Text)
    mcpu: Mapped[str | None] = mapped_column(String(64))
    num_cores: Mapped[int | None] = mapped_column(Integer)
    num_threads: Mapped[int] = mapped_column(Integer)
    host_model: Mapped[str] = mapped_column(String(200))
    tvm_version: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.current_timestamp())


class Workload(Base):
    """One tensor program, identified as MetaSchedule identifies it, with a queryable operator signature."""

    __tablename__ = "workload"
    __table_args__ = (UniqueConstraint("shash", "module_equality"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # size_t printed in decimal: values at or above 2**63 occur, so it cannot be a BIGINT.
    shash: Mapped[str] = mapped_column(String(24))
    module_equality: Mapped[str] = mapped_column(String(32), default="structural")
    # zlib-compressed JSON graph of the IRModule: the payload of ``Workload.as_json()[1]``, base64-decoded.
    mod_json_z: Mapped[bytes] = mapped_column(LargeBinary)
    # ``ArgInfo`` list as TVM writes it in every tuning record; identical for all records of one workload.
    args_info_json: Mapped[str] = mapped_column(Text)
    op_kind: Mapped[str] = mapped_column(String(32), index=True)
    task_name: Mapped[str] = mapped_column(String(200), index=True)
    iter_kinds: Mapped[str] = mapped_column(String(64))
    extents_json: Mapped[str] = mapped_column(Text)
    args_json: Mapped[str] = mapped_column(Text)
    flops: Mapped[float] = mapped_column(Float)
    # float32 vector of registry.store.embedding.embed(signature), for donor search.
    embedding: Mapped[bytes] = mapped_column(LargeBinary)
    tvm_version: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.current_timestamp())

    args: Mapped[list[WorkloadArg]] = relationship(
        back_populates="workload", cascade="all, delete-orphan", order_by="WorkloadArg.position"
    )


class WorkloadArg(Base):
    """One buffer argument of a workload, so that ``--shape``/``--dtype`` filters are index lookups, not scans."""

    __tablename__ = "workload_arg"
    __table_args__ = (Index(None, "shape", "dtype"),)

    workload_id: Mapped[int] = mapped_column(ForeignKey("workload.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    shape: Mapped[str] = mapped_column(String(200))  # "1x3x224x224"
    dtype: Mapped[str] = mapped_column(String(32))

    workload: Mapped[Workload] = relationship(back_populates="args")


class TraceSkeleton(Base):
    """The instruction list of a trace, stored once.

    Records sampled from one design space differ only in their decisions, so a record keeps its decisions and points
    here for the instructions: about 1.4 KB of instructions per record become one shared row, and importing needs no
    per-record compression.
    """

    __tablename__ = "trace_skeleton"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    insts_json_z: Mapped[bytes] = mapped_column(LargeBinary)


class TuningRecord(Base):
    """One measured schedule of a workload on a device."""

    __tablename__ = "tuning_record"
    __table_args__ = (
        # One row per measurement of a schedule per origin: two registries' measurements of one schedule both stay.
        UniqueConstraint("workload_id", "device_id", "trace_hash", "origin"),
        # The hot query: best records of one workload on one device.
        Index(None, "workload_id", "device_id", "mean_s"),
        # The storage layer validates both before writing; the schema refuses a row written around it (0008).
        CheckConstraint(_one_of("source", SOURCES), name="source"),
        CheckConstraint(_one_of("trust", TRUST_LEVELS), name="trust"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # No foreign keys (migration 0004): PostgreSQL checks one per inserted row, which took more than half of its
    # time in a bulk write. The storage layer takes these ids from rows of the same transaction, and nothing is
    # ever deleted from the tables they point to.
    workload_id: Mapped[int] = mapped_column(BigId)
    device_id: Mapped[int] = mapped_column(Integer, index=True)
    # First 128 bits of the sha256 of the whole trace's canonical JSON, ``[instructions, decisions]``, in hex: unique
    # enough within one (workload, device), and half the key of the unique index that every insert searches.
    trace_hash: Mapped[str] = mapped_column(String(32))
    # Not indexed: skeletons are never deleted, so nothing looks records up by skeleton.
    skeleton_id: Mapped[int] = mapped_column(BigId)
    decisions_json: Mapped[str] = mapped_column(Text)
    run_secs_json: Mapped[str] = mapped_column(Text)
    # Mean of run_secs; NULL when the candidate failed to build or run (TVM writes 1e10 s for those; rows.py counts
    # anything from 1e9 s up as failed, as TVM's own get_top_k does).
    mean_s: Mapped[float | None] = mapped_column(Float)
    ok: Mapped[bool] = mapped_column(Boolean)
    source: Mapped[str] = mapped_column(String(16))
    donor_record_id: Mapped[int | None] = mapped_column(BigId)
    team: Mapped[str | None] = mapped_column(String(100))
    model: Mapped[str | None] = mapped_column(String(200), index=True)  # `lookup --model` matches it
    host: Mapped[str | None] = mapped_column(String(200))
    tvm_version: Mapped[str] = mapped_column(String(64))
    tool_version: Mapped[str] = mapped_column(String(64))
    # When it was measured, where it was measured: kept as they were when a record travels by bundle or sync.
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.current_timestamp())
    # The id of the registry that measured it (RegistryInfo.registry_id), or LOG_ORIGIN.
    origin: Mapped[str] = mapped_column(String(64))
    trust: Mapped[str] = mapped_column(String(16))
    # What `registry verify` measured here, and when; the claim stays in mean_s.
    verified_mean_s: Mapped[float | None] = mapped_column(Float)
    verified_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))


class BestRecord(Base):
    """The preferred ok record of each (workload, device), kept current on every write: the fastest of the most
    trusted tier (``TRUST_TIER``; disputed records never).

    It turns "best schedule per workload" — the question behind lookup, export --best-only and compilation — into one
    index lookup instead of a scan over every record.
    """

    __tablename__ = "best_record"

    workload_id: Mapped[int] = mapped_column(ForeignKey("workload.id", ondelete="CASCADE"), primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("device.id", ondelete="CASCADE"), primary_key=True, index=True)
    record_id: Mapped[int] = mapped_column(ForeignKey("tuning_record.id", ondelete="CASCADE"))
    mean_s: Mapped[float] = mapped_column(Float)
    n_records: Mapped[int] = mapped_column(Integer)
    tier: Mapped[int] = mapped_column(Integer)  # TRUST_TIER of the record: 0 measured here or verified, 1 imported


class Model(Base):
    """A model seen by the registry: an ONNX file at fixed input shapes."""

    __tablename__ = "model"
    __table_args__ = (UniqueConstraint("sha256", "input_shapes_json"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    sha256: Mapped[str] = mapped_column(String(64))
    input_shapes_json: Mapped[str] = mapped_column(String(1000))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.current_timestamp())

    tasks: Mapped[list[ModelTask]] = relationship(back_populates="model", cascade="all, delete-orphan")


class ModelTask(Base):
    """Which workloads a model contains, and how many times each runs per inference."""

    __tablename__ = "model_task"

    model_id: Mapped[int] = mapped_column(ForeignKey("model.id", ondelete="CASCADE"), primary_key=True)
    workload_id: Mapped[int] = mapped_column(
        ForeignKey("workload.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    task_name: Mapped[str] = mapped_column(String(200))
    weight: Mapped[int] = mapped_column(Integer)

    model: Mapped[Model] = relationship(back_populates="tasks")


class PlainTask(Base):
    """A model's kernels as plain TVM extracts them from it (exact math, NCHW convolutions, weights as given), beside
    the registry's own (``ModelTask``): ``registry export -o`` gives plain ``compile_relax`` a record for each, the
    registry's schedule of the model replayed on it where it applies (migration 0005)."""

    __tablename__ = "plain_task"

    model_id: Mapped[int] = mapped_column(ForeignKey("model.id", ondelete="CASCADE"), primary_key=True)
    workload_id: Mapped[int] = mapped_column(
        ForeignKey("workload.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    task_name: Mapped[str] = mapped_column(String(200))
    weight: Mapped[int] = mapped_column(Integer)


class RegistryInfo(Base):
    """This registry's identity: the origin stamped on the records it measures, so that they keep it elsewhere."""

    __tablename__ = "registry_info"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    registry_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.current_timestamp())


class SyncState(Base):
    """How far `registry sync` has copied from one source registry into this one, per filter set: the next sync
    copies only records with higher ids in the source."""

    __tablename__ = "sync_state"

    source_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    filters_key: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the filters' canonical JSON
    last_record_id: Mapped[int] = mapped_column(BigInteger)
    synced_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.current_timestamp())


class Predictor(Base):
    """A cost model pre-trained on one device's records: a versioned artifact, so a tuning run can start from it.

    ``blob`` is the model as its library saves it (``xgb-v2``: the zip of ``registry/tvm_side/predictor_blob.py``,
    booster and training features as data; ``xgb`` rows, written before it, hold XGBModel's tar and are never
    opened). Versions count up per device; a newer one supersedes, the older ones stay for comparison.
    """

    __tablename__ = "predictor"
    __table_args__ = (UniqueConstraint("device_id", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("device.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    tvm_version: Mapped[str] = mapped_column(String(64))
    n_workloads: Mapped[int] = mapped_column(Integer)
    n_records: Mapped[int] = mapped_column(Integer)
    # The held-out evaluation at training time (JSON), next to a random ranking's: how far to trust the model.
    metrics_json: Mapped[str] = mapped_column(Text)
    blob: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.current_timestamp())


class ApiToken(Base):
    """A token ``registry serve`` admits: its sha256 only (the token itself is printed once, by ``registry token
    create``), its name and role. A revoked token stays, so that its name is not given to another (migration 0006).
    ``expires_at``: when the server stops admitting it; NULL never (migration 0009)."""

    __tablename__ = "api_token"
    __table_args__ = (CheckConstraint("role IN ('reader', 'writer', 'admin')", name="role"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.current_timestamp())
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))


class TaskEffort(Base):
    """How hard one workload was searched on one device, and which tuning run holds it now (migration 0007).

    ``trials`` and ``seconds`` add up every tuning run's measured candidates and wall time on the task; ``curve_json``
    is its best latency over those trials, ``[[trials, best µs], ...]``; ``plateau`` says the last trials gained too
    little to go on (``registry.pipeline.effort``). ``holder`` and ``lease_until``: the run tuning it now, until when
    (UTC); another run tunes other tasks first, and takes this one only once the lease is released or expired. The
    database is the coordinator: a conditional UPDATE takes a lease, so two runs never both hold one."""

    __tablename__ = "task_effort"
    __table_args__ = (CheckConstraint("trials >= 0 AND seconds >= 0", name="effort"),)

    workload_id: Mapped[int] = mapped_column(BigId, primary_key=True)
    device_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trials: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    curve_json: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")
    plateau: Mapped[bool] = mapped_column(Boolean, default=False, server_default=expression.false())
    holder: Mapped[str | None] = mapped_column(String(200))
    lease_until: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), server_default=func.current_timestamp())
