"""Reading one model's tasks and the history of their records on one device: what ``registry report`` draws.

No TVM here: a report is written from the store alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, func, select

from registry.store.sql.lookup import as_row_id
from registry.store.sql.models import Device, Model, ModelTask, PlainTask, TuningRecord, Workload
from registry.store.values import DonorRow, ModelRow, PlainTaskRow, RecordHistory, RecordPoint, TaskRow


def find_models(conn: Connection, selector: str, sha256: str | None = None) -> list[ModelRow]:
    """Models named ``selector`` (or with that id), newest first; only the one with ``sha256`` when it is given."""
    stmt = select(Model.id, Model.name, Model.sha256, Model.input_shapes_json, Model.created_at)
    if (row_id := as_row_id(selector)) is not None:
        stmt = stmt.where((Model.name == selector) | (Model.id == row_id))
    else:
        stmt = stmt.where(Model.name == selector)
    if sha256 is not None:
        stmt = stmt.where(Model.sha256 == sha256)
    return [ModelRow(*r) for r in conn.execute(stmt.order_by(Model.id.desc())).all()]


def model_names(conn: Connection, limit: int = 10) -> list[str]:
    rows = conn.execute(select(Model.name).group_by(Model.name).order_by(func.max(Model.id).desc()).limit(limit))
    return [r[0] for r in rows]


def model_tasks(conn: Connection, model_id: int) -> list[TaskRow]:
    rows = conn.execute(
        select(ModelTask.workload_id, ModelTask.task_name, ModelTask.weight, Workload.op_kind, Workload.embedding)
        .join(Workload, Workload.id == ModelTask.workload_id)
        .where(ModelTask.model_id == model_id)
        .order_by(ModelTask.workload_id)
    ).all()
    return [TaskRow(*r) for r in rows]


def plain_tasks(conn: Connection) -> list[PlainTaskRow]:
    rows = conn.execute(
        select(PlainTask.model_id, PlainTask.workload_id, PlainTask.task_name).order_by(
            PlainTask.model_id, PlainTask.workload_id
        )
    ).all()
    return [PlainTaskRow(*r) for r in rows]


def busiest_device(conn: Connection, workload_ids: Sequence[int]) -> tuple[int, str] | None:
    """The device (id, name) with the most ok records of these workloads; None when none has any."""
    if not workload_ids:
        return None
    row = conn.execute(
        select(Device.id, Device.name)
        .join(TuningRecord, TuningRecord.device_id == Device.id)
        .where(TuningRecord.workload_id.in_(list(workload_ids)), TuningRecord.ok.is_(True))
        .group_by(Device.id, Device.name)
        .order_by(func.count().desc(), Device.id)
        .limit(1)
    ).first()
    return None if row is None else (row[0], row[1])


def record_history(conn: Connection, workload_ids: Sequence[int], device_id: int) -> RecordHistory:
    """Each workload's improving ok records on a device (``RecordHistory``). The database picks them with a window
    over each workload's records in time order, so a model whose tasks hold 10^5 records hands Python only the few
    hundred points its curves have."""
    if not workload_ids:
        return RecordHistory([], {}, None)
    order = (TuningRecord.created_at, TuningRecord.id)
    earlier_best = func.min(TuningRecord.mean_s).over(
        partition_by=TuningRecord.workload_id, order_by=order, rows=(None, -1)
    )
    rows = (
        select(
            TuningRecord.id,
            TuningRecord.workload_id,
            TuningRecord.created_at,
            TuningRecord.mean_s,
            TuningRecord.source,
            TuningRecord.donor_record_id,
            earlier_best.label("earlier_best"),
            func.count().over(partition_by=TuningRecord.workload_id).label("n"),
            func.max(TuningRecord.created_at).over().label("last_at"),
        )
        .where(
            TuningRecord.workload_id.in_(list(workload_ids)),
            TuningRecord.device_id == device_id,
            TuningRecord.ok.is_(True),
        )
        .subquery()
    )
    found = conn.execute(
        select(rows)
        .where(rows.c.earlier_best.is_(None) | (rows.c.mean_s < rows.c.earlier_best))
        .order_by(rows.c.created_at, rows.c.id)
    )
    points, counts, last_at = [], {}, None
    for rid, wid, created, mean_s, source, donor, _earlier, n, last in found:
        points.append(RecordPoint(rid, wid, created, mean_s, source, donor))
        counts[wid] = n
        last_at = last
    return RecordHistory(points, counts, last_at)


def donors(conn: Connection, record_ids: Sequence[int]) -> dict[int, DonorRow]:
    """Donor records by id, with their workload's task name and embedding."""
    if not record_ids:
        return {}
    rows = conn.execute(
        select(
            TuningRecord.id, TuningRecord.workload_id, TuningRecord.device_id, Workload.task_name, Workload.embedding
        )
        .join(Workload, Workload.id == TuningRecord.workload_id)
        .where(TuningRecord.id.in_(list(record_ids)))
    ).all()
    return {r[0]: DonorRow(*r) for r in rows}
