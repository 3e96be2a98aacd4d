"""What one registry hands another: its records with full provenance, by stable identities instead of local ids.

``registry export --bundle`` writes this stream to a file (``registry/bundle.py``), ``registry sync`` hands it
straight to the other registry; both read it with ``read_exchange`` and write it with
``registry.tvm_side.exchange_import``. Nothing here imports TVM.

Identities that travel: a device by its key (sha256 of target, threads, hardware and TVM release), a workload by its
structural hash and module-equality mode plus its module (the receiver recomputes the hash), a trace by its skeleton's
hash and decisions, a record by (workload, device, trace hash, origin), a model by its file's sha256 and input shapes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.orm import aliased

from registry.store.ingest import registry_id
from registry.store.models import Device, Model, ModelTask, TraceSkeleton, TuningRecord, Workload
from registry.store.rows import canonical_json

# Records read per round trip: memory stays flat for registries of millions.
CHUNK = 5000


@dataclass(frozen=True)
class ExchangeFilters:
    """Which records travel. ``device_keys`` None: every device."""

    device_keys: tuple[str, ...] | None = None
    team: str | None = None
    model: str | None = None
    since: dt.datetime | None = None  # measured at or after

    def key(self) -> str:
        """Identifies the filter set in ``sync_state``: a sync with other filters keeps its own progress."""
        value = {k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in asdict(self).items()}
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


@dataclass(frozen=True)
class ExRecord:
    """A record; ``workload`` and ``donor`` name the sender's workloads by (shash, module_equality)."""

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


@dataclass
class ExchangeSet:
    """Everything but the records, which stream (``records``): small enough to hold, needed before any record."""

    origin: str  # the sending registry's id
    devices: list[ExDevice] = field(default_factory=list)
    workloads: list[ExWorkload] = field(default_factory=list)
    skeletons: dict[str, str] = field(default_factory=dict)  # hash -> instructions' canonical JSON
    models: list[ExModel] = field(default_factory=list)
    n_records: int = 0
    last_record_id: int = 0  # the highest record id in the set: where the next incremental sync starts
    # The records in batches, read from the start on each call (a write that lost a lock race starts over).
    records: Callable[[], Iterator[list[ExRecord]]] = lambda: iter(())


def _record_filter(f: ExchangeFilters, after_id: int, device_ids: list[int] | None) -> list[Any]:
    where: list[Any] = [TuningRecord.id > after_id]
    if device_ids is not None:
        where.append(TuningRecord.device_id.in_(device_ids))
    if f.team is not None:
        where.append(TuningRecord.team == f.team)
    if f.model is not None:
        where.append(TuningRecord.model == f.model)
    if f.since is not None:
        where.append(TuningRecord.created_at >= f.since)
    return where


def read_exchange(conn: Connection, f: ExchangeFilters, *, after_id: int = 0) -> ExchangeSet:
    """The records matching ``f`` with ids above ``after_id``, and what they refer to.

    ``conn`` must see one snapshot for the whole read (``Store.read(snapshot=True)``), and stay open while
    ``records`` is consumed."""
    device_ids = None
    if f.device_keys is not None:
        device_ids = list(conn.execute(select(Device.id).where(Device.key.in_(f.device_keys))).scalars())
    where = _record_filter(f, after_id, device_ids)
    n, last = conn.execute(select(func.count(), func.max(TuningRecord.id)).where(*where)).one()
    out = ExchangeSet(origin=registry_id(conn), n_records=n or 0, last_record_id=last or after_id)
    if not n:
        return out
    wl_ids = set(conn.execute(select(TuningRecord.workload_id).where(*where).distinct()).scalars())
    dev_ids = set(conn.execute(select(TuningRecord.device_id).where(*where).distinct()).scalars())
    # Models whose tasks include a travelling workload, with all their tasks (a model's task list is whole).
    model_ids = set(conn.execute(select(ModelTask.model_id).where(ModelTask.workload_id.in_(wl_ids))).scalars())
    if f.model is not None:
        model_ids &= set(conn.execute(select(Model.id).where(Model.name == f.model)).scalars())
    tasks = conn.execute(
        select(ModelTask.model_id, ModelTask.workload_id, ModelTask.task_name, ModelTask.weight)
        .where(ModelTask.model_id.in_(model_ids))
        .order_by(ModelTask.model_id, ModelTask.workload_id)
    ).all()
    wl_ids |= {t.workload_id for t in tasks}
    idents = {}
    for wid, shash, mode, mod_z in conn.execute(
        select(Workload.id, Workload.shash, Workload.module_equality, Workload.mod_json_z)
        .where(Workload.id.in_(wl_ids))
        .order_by(Workload.id)
    ):
        idents[wid] = (shash, mode)
        out.workloads.append(ExWorkload(shash, mode, zlib.decompress(mod_z).decode()))
    keys = {}
    device_cols = (Device.id, Device.key, Device.target_json, Device.num_threads, Device.host_model, Device.tvm_version)
    for did, key, target, threads, host_model, tvm in conn.execute(
        select(*device_cols).where(Device.id.in_(dev_ids)).order_by(Device.id)
    ):
        keys[did] = key
        out.devices.append(ExDevice(key, json.loads(target), threads, host_model, tvm))
    by_model: dict[int, list] = {}
    for t in tasks:
        by_model.setdefault(t.model_id, []).append((idents[t.workload_id], t.task_name, t.weight))
    model_cols = (Model.id, Model.name, Model.sha256, Model.input_shapes_json)
    for mid, name, sha, shapes in conn.execute(select(*model_cols).where(Model.id.in_(model_ids)).order_by(Model.id)):
        out.models.append(ExModel(name, sha, json.loads(shapes), by_model.get(mid, [])))
    skel_ids = select(TuningRecord.skeleton_id).where(*where).distinct()
    for h, insts_z in conn.execute(
        select(TraceSkeleton.hash, TraceSkeleton.insts_json_z).where(TraceSkeleton.id.in_(skel_ids))
    ):
        out.skeletons[h] = zlib.decompress(insts_z).decode()
    out.records = lambda: _records(conn, where, idents, keys)
    return out


def _records(conn: Connection, where: list[Any], idents: dict, keys: dict) -> Iterator[list[ExRecord]]:
    donor = aliased(TuningRecord)
    donor_wl = aliased(Workload)
    donor_dev = aliased(Device)
    stmt = (
        select(
            TuningRecord.id,
            TuningRecord.workload_id,
            TuningRecord.device_id,
            TraceSkeleton.hash,
            TuningRecord.decisions_json,
            TuningRecord.run_secs_json,
            TuningRecord.source,
            TuningRecord.origin,
            TuningRecord.team,
            TuningRecord.model,
            TuningRecord.host,
            TuningRecord.tool_version,
            TuningRecord.created_at,
            donor_wl.shash,
            donor_wl.module_equality,
            donor_dev.key,
            donor.trace_hash,
            donor.origin,
        )
        .join(TraceSkeleton, TraceSkeleton.id == TuningRecord.skeleton_id)
        .outerjoin(donor, donor.id == TuningRecord.donor_record_id)
        .outerjoin(donor_wl, donor_wl.id == donor.workload_id)
        .outerjoin(donor_dev, donor_dev.id == donor.device_id)
        .where(*where)
        .order_by(TuningRecord.id)
    )
    batch: list[ExRecord] = []
    for row in conn.execute(stmt.execution_options(yield_per=CHUNK)):
        (rid, wid, did, skel, decisions, secs, source, origin, team, model, host, tool, created,
         d_shash, d_mode, d_key, d_hash, d_origin) = row  # fmt: skip
        batch.append(
            ExRecord(
                rid,
                idents[wid],
                keys[did],
                skel,
                decisions,
                json.loads(secs),
                source,
                origin,
                team,
                model,
                host,
                tool,
                created,
                ((d_shash, d_mode), d_key, d_hash, d_origin) if d_shash is not None else None,
            )  # fmt: skip
        )
        if len(batch) >= CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch
