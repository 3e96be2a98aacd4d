"""Reading the store: device selection, lookup, statistics and the record streams behind export and TVM."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session

from registry import hostinfo
from registry.errors import UnknownDeviceError
from registry.store.models import (
    BestRecord,
    Device,
    Model,
    ModelTask,
    TraceSkeleton,
    TuningRecord,
    Workload,
    WorkloadArg,
)
from registry.store.rows import shape_text


def resolve_devices(conn: Session, selector: str) -> list[Device]:
    """Devices matching ``selector``: ``host`` (this machine's CPU and TVM release), a device id, or a device name.

    Raises UnknownDeviceError, naming the known devices, when nothing matches.
    """
    stmt = select(Device).order_by(Device.id)
    sel = selector.strip()
    if sel == "host":
        stmt = stmt.where(Device.host_model == hostinfo.cpu_model(), Device.tvm_version == hostinfo.tvm_version())
    elif sel.isdigit():
        stmt = stmt.where(Device.id == int(sel))
    else:
        stmt = stmt.where(Device.name == sel)
    found = list(conn.execute(stmt).scalars())
    if not found:
        known = ", ".join(f"{d.id}:{d.name}" for d in conn.execute(select(Device).order_by(Device.id)).scalars())
        where = "on this machine " if sel == "host" else ""
        raise UnknownDeviceError(
            f"no device {sel!r} {where}in the registry (known: {known or 'none yet'}); see `registry devices`"
        )
    return found


def resolve_one_device(conn: Session, selector: str) -> Device:
    found = resolve_devices(conn, selector)
    if len(found) > 1:
        choices = ", ".join(f"{d.id} ({d.name}, {d.host_model}, TVM {d.tvm_version})" for d in found)
        raise UnknownDeviceError(f"device {selector!r} is ambiguous; give its id, one of: {choices}")
    return found[0]


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def lookup(conn: Session, f: LookupFilter) -> list[LookupRow]:
    """The best ``top_k`` records of each (workload, device) that matches every given filter.

    Driven by ``best_record``, so its cost grows with the rows returned, not with the records stored.
    """
    pairs = (
        select(BestRecord.workload_id, BestRecord.device_id, BestRecord.n_records, BestRecord.record_id)
        .join(Workload, Workload.id == BestRecord.workload_id)
        .order_by(Workload.op_kind, BestRecord.workload_id, BestRecord.device_id)
        .limit(f.limit)
    )
    if f.op:
        pairs = pairs.where(Workload.op_kind == f.op.lower())
    if f.workload:
        pairs = pairs.where(Workload.shash == f.workload)
    if f.device_ids is not None:
        pairs = pairs.where(BestRecord.device_id.in_(f.device_ids))
    if f.shape is not None or f.dtype:
        arg = select(WorkloadArg.workload_id)
        if f.shape is not None:
            arg = arg.where(WorkloadArg.shape == shape_text(f.shape))
        if f.dtype:
            arg = arg.where(WorkloadArg.dtype == f.dtype)
        pairs = pairs.where(BestRecord.workload_id.in_(arg))
    if f.model:
        in_model = select(ModelTask.workload_id).join(Model).where(Model.name == f.model)
        pairs = pairs.where(BestRecord.workload_id.in_(in_model))
    found = conn.execute(pairs).all()
    if f.top_k <= 1 or not found:
        ranked = [(w, d, n, rid, 1) for w, d, n, rid in found]
    else:
        counts = {(w, d): n for w, d, n, _ in found}
        rn = func.row_number().over(
            partition_by=(TuningRecord.workload_id, TuningRecord.device_id), order_by=TuningRecord.mean_s
        )
        inner = (
            select(TuningRecord.workload_id, TuningRecord.device_id, TuningRecord.id, rn.label("rn"))
            .where(TuningRecord.mean_s.is_not(None))
            .where(tuple_(TuningRecord.workload_id, TuningRecord.device_id).in_(list(counts)))
            .subquery()
        )
        top = select(inner).where(inner.c.rn <= f.top_k)
        ranked = [(w, d, counts[(w, d)], rid, r) for w, d, rid, r in conn.execute(top)]
    return _lookup_rows(conn, ranked)


def _lookup_rows(conn: Session, ranked: list[tuple[int, int, int, int, int]]) -> list[LookupRow]:
    if not ranked:
        return []
    info = {rid: (w, d, n, rank) for w, d, n, rid, rank in ranked}
    stmt = (
        select(TuningRecord, Workload, Device)
        .join(Workload, Workload.id == TuningRecord.workload_id)
        .join(Device, Device.id == TuningRecord.device_id)
        .where(TuningRecord.id.in_(list(info)))
    )
    rows = []
    for rec, wl, dev in conn.execute(stmt):
        rows.append(
            LookupRow(
                workload=wl.shash,
                op=wl.op_kind,
                task=wl.task_name,
                args=json.loads(wl.args_json),
                flops=wl.flops,
                device_id=dev.id,
                device=dev.name,
                threads=dev.num_threads,
                rank=info[rec.id][3],
                record_id=rec.id,
                latency_us=rec.mean_s * 1e6,
                gflops=wl.flops / rec.mean_s / 1e9 if rec.mean_s else 0.0,
                records=info[rec.id][2],
                source=rec.source,
                team=rec.team,
                model=rec.model,
                created_at=rec.created_at.isoformat(timespec="seconds"),
            )
        )
    rows.sort(key=lambda r: (r.op, r.task, r.workload, r.device_id, r.rank))
    return rows


def stats(conn: Session) -> dict[str, Any]:
    def count(stmt) -> int:
        return conn.execute(stmt).scalar() or 0

    by_source = dict(conn.execute(select(TuningRecord.source, func.count()).group_by(TuningRecord.source)).all())
    by_op = conn.execute(
        select(Workload.op_kind, func.count()).group_by(Workload.op_kind).order_by(func.count().desc())
    ).all()
    per_device = conn.execute(
        select(
            Device.id, Device.name, func.count(BestRecord.workload_id), func.coalesce(func.sum(BestRecord.n_records), 0)
        )
        .outerjoin(BestRecord, BestRecord.device_id == Device.id)
        .group_by(Device.id, Device.name)
        .order_by(Device.id)
    ).all()
    return {
        "devices": count(select(func.count()).select_from(Device)),
        "workloads": count(select(func.count()).select_from(Workload)),
        "records": count(select(func.count()).select_from(TuningRecord)),
        "records_ok": count(select(func.count()).select_from(TuningRecord).where(TuningRecord.ok)),
        "models": count(select(func.count()).select_from(Model)),
        "records_by_source": by_source,
        "workloads_by_op": dict(by_op),
        "per_device": [{"id": i, "name": n, "tuned_workloads": w, "ok_records": int(r)} for i, n, w, r in per_device],
    }


def devices(conn: Session) -> list[dict[str, Any]]:
    n_records = select(TuningRecord.device_id, func.count().label("n")).group_by(TuningRecord.device_id).subquery()
    stmt = (
        select(Device, func.coalesce(n_records.c.n, 0))
        .outerjoin(n_records, n_records.c.device_id == Device.id)
        .order_by(Device.id)
    )
    return [
        {
            "id": d.id,
            "name": d.name,
            "kind": d.kind,
            "mcpu": d.mcpu,
            "num_cores": d.num_cores,
            "threads": d.num_threads,
            "host_model": d.host_model,
            "tvm_version": d.tvm_version,
            "records": n,
            "target": json.loads(d.target_json),
        }
        for d, n in conn.execute(stmt)
    ]


@dataclass
class StoredRecord:
    """A record as TVM needs it back: enough to rebuild a ``TuningRecord`` (see registry.tvm_side)."""

    id: int
    workload_id: int
    trace_json: str
    run_secs: list[float]
    mean_s: float | None


class _Skeletons:
    """Decompressed instruction lists by skeleton id: a stream of records decompresses each one once."""

    def __init__(self, conn: Session, preload=None) -> None:
        """``preload``: a select of skeleton ids to fetch in one query up front."""
        self.conn, self.cache = conn, {}
        if preload is not None:
            stmt = select(TraceSkeleton.id, TraceSkeleton.insts_json_z).where(TraceSkeleton.id.in_(preload))
            self.cache = {i: zlib.decompress(z).decode() for i, z in conn.execute(stmt)}

    def __call__(self, skeleton_id: int) -> str:
        if skeleton_id not in self.cache:
            z = self.conn.execute(select(TraceSkeleton.insts_json_z).where(TraceSkeleton.id == skeleton_id)).scalar()
            self.cache[skeleton_id] = zlib.decompress(z).decode()
        return self.cache[skeleton_id]


def _stored(row, insts: _Skeletons) -> StoredRecord:
    rid, wid, skeleton_id, decisions, run_secs, mean_s = row
    return StoredRecord(rid, wid, f"[{insts(skeleton_id)},{decisions}]", json.loads(run_secs), mean_s)


_RECORD_COLS = (
    TuningRecord.id,
    TuningRecord.workload_id,
    TuningRecord.skeleton_id,
    TuningRecord.decisions_json,
    TuningRecord.run_secs_json,
    TuningRecord.mean_s,
)


def top_k(conn: Session, workload_id: int, device_id: int, k: int) -> list[StoredRecord]:
    """The ``k`` fastest ok records of one workload on one device, fastest first."""
    stmt = (
        select(*_RECORD_COLS)
        .where(TuningRecord.workload_id == workload_id, TuningRecord.device_id == device_id)
        .where(TuningRecord.mean_s.is_not(None))
        .order_by(TuningRecord.mean_s, TuningRecord.id)
        .limit(k)
    )
    insts = _Skeletons(conn)
    return [_stored(r, insts) for r in conn.execute(stmt)]


def device_records(conn: Session, device_id: int, *, best_only: bool = False) -> Iterator[StoredRecord]:
    """Every record of a device (or only each workload's best), in workload order."""
    if best_only:
        stmt = select(*_RECORD_COLS).join(BestRecord, BestRecord.record_id == TuningRecord.id)
        stmt = stmt.where(BestRecord.device_id == device_id)
    else:
        stmt = select(*_RECORD_COLS).where(TuningRecord.device_id == device_id)
    stmt = stmt.order_by(TuningRecord.workload_id, TuningRecord.mean_s.is_(None), TuningRecord.mean_s)
    # All skeletons first: the stream below holds a cursor open, and they are few.
    insts = _Skeletons(conn, preload=stmt.with_only_columns(TuningRecord.skeleton_id).order_by(None).distinct())
    for row in conn.execute(stmt, execution_options={"yield_per": 2000}):
        yield _stored(row, insts)


def count_records(conn: Session, device_id: int) -> int:
    stmt = select(func.count()).select_from(TuningRecord).where(TuningRecord.device_id == device_id)
    return conn.execute(stmt).scalar() or 0


@dataclass
class StoredWorkload:
    id: int
    shash: str
    module_equality: str
    mod_json: str
    args_info: list[Any]


def workloads_by_id(conn: Session, ids: list[int]) -> dict[int, StoredWorkload]:
    stmt = select(
        Workload.id, Workload.shash, Workload.module_equality, Workload.mod_json_z, Workload.args_info_json
    ).where(Workload.id.in_(ids))
    return {
        i: StoredWorkload(i, s, m, zlib.decompress(z).decode(), json.loads(a)) for i, s, m, z, a in conn.execute(stmt)
    }


def workload_id(conn: Session, shash: str, module_equality: str) -> int | None:
    stmt = select(Workload.id).where(Workload.shash == shash, Workload.module_equality == module_equality)
    return conn.execute(stmt).scalar()
