"""The store's side of ``registry verify``: which imported records to re-measure, and what was found.

Records are taken best-first: a record that is its pair's ``best_record`` is what compilation would use, so it
matters most; then the others, fastest first, as they are next in line once a best one is disputed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, func, or_, select, update

from registry.store.decode import parse
from registry.store.sql.ingest import recompute_best
from registry.store.sql.models import BestRecord, Model, ModelTask, TuningRecord, Workload
from registry.store.sql.queries import reader
from registry.store.values import Claim, Verdict


def _imported(device_id: int, model: str | None):
    """The condition on TuningRecord for the imported, ok records of a device (and model)."""
    cond = [TuningRecord.device_id == device_id, TuningRecord.trust == "imported", TuningRecord.mean_s.is_not(None)]
    if model:
        # A model's records, as lookup --model finds them: the model's tasks, and records that name it.
        tasks = select(ModelTask.workload_id).join(Model, Model.id == ModelTask.model_id).where(Model.name == model)
        cond.append(or_(TuningRecord.workload_id.in_(tasks), TuningRecord.model == model))
    return cond


def imported_ids(conn: Connection, device_id: int, model: str | None, limit: int | None) -> list[int]:
    """Ids of the imported records of a device to verify, best-first (see the module docstring)."""
    stmt = (
        select(TuningRecord.id)
        .outerjoin(BestRecord, BestRecord.record_id == TuningRecord.id)
        .where(*_imported(device_id, model))
        .order_by(BestRecord.record_id.is_(None), TuningRecord.mean_s, TuningRecord.id)
        .limit(limit)
    )
    return list(conn.execute(stmt).scalars())


def count_imported(conn: Connection, device_id: int, model: str | None) -> int:
    stmt = select(func.count()).select_from(TuningRecord).where(*_imported(device_id, model))
    return conn.execute(stmt).scalar() or 0


def claims(conn: Connection, ids: Sequence[int]) -> list[Claim]:
    """The records of ``ids``, in that order."""
    stmt = (
        select(
            TuningRecord.id,
            TuningRecord.workload_id,
            TuningRecord.device_id,
            Workload.shash,
            Workload.task_name,
            TuningRecord.skeleton_id,
            TuningRecord.decisions_json,
            TuningRecord.run_secs_json,
            TuningRecord.mean_s,
            BestRecord.record_id.is_not(None),
        )
        .join(Workload, Workload.id == TuningRecord.workload_id)
        .outerjoin(BestRecord, BestRecord.record_id == TuningRecord.id)
        .where(TuningRecord.id.in_(ids))
    )
    records = reader(conn)
    found = {}
    for rid, wid, did, shash, task, skeleton, decisions, secs, mean_s, best in conn.execute(stmt):
        record = records.record((rid, wid, skeleton, decisions, secs, mean_s))
        if record is not None:  # a record whose trace is not sound is not built, let alone timed
            trace = parse(record.trace_json, f"record {rid}")
            found[rid] = Claim(rid, wid, did, shash, task, trace, mean_s, bool(best))
    records.warn()
    return [found[i] for i in ids if i in found]


def record_verdicts(conn: Connection, verdicts: Sequence[Verdict], at: dt.datetime) -> None:
    """Each record's new trust and the latency measured here, then each touched pair's best record chosen again
    (a disputed record is never best; a verified one outranks imported ones). One transaction: the caller's."""
    if not verdicts:
        return
    table = TuningRecord.__table__
    stmt = (
        update(table)
        .where(table.c.id == bindparam("rid"))
        .values(trust=bindparam("new_trust"), verified_mean_s=bindparam("measured"), verified_at=bindparam("at"))
    )
    conn.execute(
        stmt, [{"rid": v.record_id, "new_trust": v.trust, "measured": v.measured_s, "at": at} for v in verdicts]
    )
    recompute_best(conn, {(v.workload_id, v.device_id) for v in verdicts})
