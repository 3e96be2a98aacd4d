"""The web view's reads (``Browsing``): a model's coverage per device, the default schedules' timings, workload hashes
and the search as pages, with a team, a time, an order and a total.

Driven by ``best_record`` as lookup is, so a page costs what its rows cost, plus one count.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, and_, exists, func, select

from registry.errors import BadInputError
from registry.store.decode import CorruptRow, inflate, parse
from registry.store.rows import shape_text
from registry.store.sql import lookup
from registry.store.sql.models import (
    BestRecord,
    Device,
    Model,
    ModelTask,
    TraceSkeleton,
    TuningRecord,
    Workload,
    WorkloadArg,
)
from registry.store.validation import is_default_schedule
from registry.store.values import BROWSE_SORTS, BrowseFilter, BrowsePage, DeviceCoverage


def coverage(conn: Connection, model_id: int) -> list[DeviceCoverage]:
    """Each device with an ok best record of one of the model's tasks: the most records first."""
    rows = conn.execute(
        select(
            Device.id,
            Device.name,
            func.count(),
            func.sum(BestRecord.n_records),
            func.sum(ModelTask.weight * BestRecord.mean_s),
        )
        .select_from(ModelTask)
        .join(BestRecord, BestRecord.workload_id == ModelTask.workload_id)
        .join(Device, Device.id == BestRecord.device_id)
        .where(ModelTask.model_id == model_id)
        .group_by(Device.id, Device.name)
    ).all()
    found = [DeviceCoverage(d, name, int(n), int(recs or 0), float(est or 0.0) * 1e6) for d, name, n, recs, est in rows]
    return sorted(found, key=lambda c: (-c.records, c.device_id))


def _is_default(insts_z: bytes | None) -> bool:
    """Whether compressed trace instructions are TVM's default on a CPU (``validation.is_default_schedule``)."""
    try:
        insts = parse(inflate(insts_z, "a trace's instructions"), "a trace's instructions") if insts_z else None
    except CorruptRow:  # a row that cannot be read is no default: the report reads on
        return False
    return is_default_schedule(insts)


def default_latencies(conn: Connection, workload_ids: Sequence[int], device_id: int) -> dict[int, float]:
    """Workload id -> µs of its default schedule on a device, where a record of it is stored (a run files the
    default when every candidate lost to it)."""
    if not workload_ids:
        return {}
    rows = conn.execute(
        select(TuningRecord.workload_id, TuningRecord.mean_s, TraceSkeleton.insts_json_z)
        .join(TraceSkeleton, TraceSkeleton.id == TuningRecord.skeleton_id)
        .where(
            TuningRecord.workload_id.in_(list(workload_ids)),
            TuningRecord.device_id == device_id,
            TuningRecord.ok.is_(True),
            TuningRecord.decisions_json == "[]",
        )
    ).all()
    found: dict[int, float] = {}
    for wid, mean_s, insts in rows:
        if mean_s is not None and _is_default(insts):
            found[wid] = min(found.get(wid, float("inf")), mean_s * 1e6)
    return found


def workload_hashes(conn: Connection, workload_ids: Sequence[int]) -> dict[int, str]:
    if not workload_ids:
        return {}
    rows = conn.execute(select(Workload.id, Workload.shash).where(Workload.id.in_(list(workload_ids))))
    return {w: s for w, s in rows}


_ORDERS = {
    "operator": (Workload.op_kind, BestRecord.workload_id, BestRecord.device_id),
    "latency": (BestRecord.mean_s, BestRecord.workload_id, BestRecord.device_id),
    "newest": (TuningRecord.created_at.desc(), TuningRecord.id.desc()),
    "team": (TuningRecord.team, Workload.op_kind, BestRecord.workload_id, BestRecord.device_id),
    "device": (BestRecord.device_id, Workload.op_kind, BestRecord.workload_id),
}


def browse(conn: Connection, f: BrowseFilter) -> BrowsePage:
    """One page of the best record of each (workload, device) matching every filter given, and the total."""
    if f.sort not in BROWSE_SORTS:
        raise BadInputError(f"unknown order {f.sort!r}; expected one of {', '.join(BROWSE_SORTS)}")
    where = []
    if f.op:
        where.append(Workload.op_kind == f.op.lower())
    if f.workload:
        where.append(Workload.shash == f.workload)
    if f.trust == "verified":
        where.append(BestRecord.tier == 0)
    elif f.trust != "imported":
        raise BadInputError(f"unknown trust {f.trust!r}; expected imported or verified")
    if f.device_ids is not None:
        where.append(BestRecord.device_id.in_(f.device_ids))
    if f.shape is not None or f.dtype:
        arg = [WorkloadArg.workload_id == BestRecord.workload_id]
        if f.shape is not None:
            arg.append(WorkloadArg.shape == shape_text(f.shape))
        if f.dtype:
            arg.append(WorkloadArg.dtype == f.dtype)
        where.append(exists(select(WorkloadArg.workload_id).where(*arg)))
    if f.model:
        tasks = select(ModelTask.workload_id).join(Model, Model.id == ModelTask.model_id).where(Model.name == f.model)
        named = select(TuningRecord.workload_id).where(TuningRecord.model == f.model)
        where.append(BestRecord.workload_id.in_(tasks.union(named)))
    if f.team is not None or f.since is not None:  # pairs where the team wrote a record (since then)
        other = TuningRecord.__table__.alias("by_team")
        cond = [other.c.workload_id == BestRecord.workload_id, other.c.device_id == BestRecord.device_id]
        if f.team is not None:
            cond.append(other.c.team == f.team)
        if f.since is not None:
            cond.append(other.c.created_at >= f.since)
        where.append(exists(select(other.c.id).where(and_(*cond))))
    base = (
        select(BestRecord.record_id, BestRecord.n_records)
        .join(Workload, Workload.id == BestRecord.workload_id)
        .join(TuningRecord, TuningRecord.id == BestRecord.record_id)
        .where(*where)
    )
    total = conn.execute(select(func.count()).select_from(base.subquery())).scalar() or 0
    page = conn.execute(base.order_by(*_ORDERS[f.sort]).offset(f.offset).limit(f.limit)).all()
    order = {rid: i for i, (rid, _n) in enumerate(page)}
    rows = lookup._rows(lookup.Sql.under(conn), {rid: (n, 1) for rid, n in page}) if page else []
    rows.sort(key=lambda r: order[r.record_id])
    return BrowsePage(rows, int(total))
