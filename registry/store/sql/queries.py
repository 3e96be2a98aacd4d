"""Reading the store: statistics and the record streams behind export and TVM (lookup lives in ``lookup.py``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, func, select

from registry.errors import NotFoundError, RegistryWarning
from registry.store.decode import CorruptRow, RecordReader, inflate, parse
from registry.store.rows import utc_text
from registry.store.sql.models import (
    BestRecord,
    Device,
    Model,
    TraceSkeleton,
    TuningRecord,
    Workload,
)
from registry.store.sql.trust import TIER
from registry.store.trust import DEFAULT_TRUST, accepted
from registry.store.values import (
    DeviceListing,
    DonorRecord,
    IndexedSet,
    RecordProvenance,
    RegistryStats,
    StoredRecord,
    StoredWorkload,
    TeamArrivals,
    TunedOnDevice,
    TuningState,
)


def stats(conn: Connection) -> RegistryStats:
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
    # What arrived lately, by team: the teams whose records came last first (an untagged record's team is None).
    last = func.max(TuningRecord.created_at)
    by_team = conn.execute(
        select(TuningRecord.team, func.count(), last).group_by(TuningRecord.team).order_by(last.desc()).limit(20)
    ).all()
    return RegistryStats(
        devices=count(select(func.count()).select_from(Device)),
        workloads=count(select(func.count()).select_from(Workload)),
        records=count(select(func.count()).select_from(TuningRecord)),
        records_ok=count(select(func.count()).select_from(TuningRecord).where(TuningRecord.ok)),
        models=count(select(func.count()).select_from(Model)),
        records_by_source=by_source,
        workloads_by_op=dict(by_op),
        per_device=tuple(TunedOnDevice(i, n, w, int(r)) for i, n, w, r in per_device),
        by_team=tuple(TeamArrivals(t, n, utc_text(at)) for t, n, at in by_team),
    )


def devices(conn: Connection) -> list[DeviceListing]:
    n_records = select(TuningRecord.device_id, func.count().label("n")).group_by(TuningRecord.device_id).subquery()
    stmt = (
        select(*Device.__table__.c, func.coalesce(n_records.c.n, 0).label("n_records"))
        .outerjoin(n_records, n_records.c.device_id == Device.id)
        .order_by(Device.id)
    )
    return [
        DeviceListing(d.id, d.name, d.kind, d.mcpu, d.num_cores, d.num_threads, d.host_model, d.tvm_version,
                      d.n_records, _loads(d.target_json))
        for d in conn.execute(stmt)
    ]  # fmt: skip


def _loads(text: str) -> Any:
    """JSON a listing shows as it is, or None where a row holds no JSON (a listing must not fail on one row)."""
    try:
        return parse(text, "a row")
    except CorruptRow:
        return None


def reader(conn: Connection, preload=None) -> RecordReader:
    """Stored records from rows of ``_RECORD_COLS``, each skeleton decoded once; ``preload``: a select of skeleton
    ids to fetch in one query up front."""
    found = RecordReader(
        lambda sid: conn.execute(select(TraceSkeleton.insts_json_z).where(TraceSkeleton.id == sid)).scalar()
    )
    if preload is not None:
        found.preload(
            conn.execute(select(TraceSkeleton.id, TraceSkeleton.insts_json_z).where(TraceSkeleton.id.in_(preload)))
        )
    return found


_RECORD_COLS = (
    TuningRecord.id,
    TuningRecord.workload_id,
    TuningRecord.skeleton_id,
    TuningRecord.decisions_json,
    TuningRecord.run_secs_json,
    TuningRecord.mean_s,
)


def top_k(conn: Connection, workload_id: int, device_id: int, k: int, trust: str = DEFAULT_TRUST) -> list[StoredRecord]:
    """The ``k`` preferred ok records of one workload on one device that ``trust`` accepts: those measured here or
    verified first, fastest first."""
    stmt = (
        select(*_RECORD_COLS, TIER)
        .where(TuningRecord.workload_id == workload_id, TuningRecord.device_id == device_id)
        .where(TuningRecord.mean_s.is_not(None), TuningRecord.trust.in_(accepted(trust)))
        .order_by(TIER, TuningRecord.mean_s, TuningRecord.id)
        .limit(k)
    )
    records = reader(conn)
    out = [replace(record, tier=r[-1]) for r in conn.execute(stmt) if (record := records.record(r[:-1])) is not None]
    records.warn()
    return out


def device_records(
    conn: Connection, device_id: int, *, best_only: bool = False, unsound: bool = False
) -> Iterator[StoredRecord]:
    """Every record of a device (or only each workload's best), in workload order; with ``unsound`` those that
    cannot be used too, with their ``problem``."""
    if best_only:
        stmt = select(*_RECORD_COLS).join(BestRecord, BestRecord.record_id == TuningRecord.id)
        stmt = stmt.where(BestRecord.device_id == device_id)
    else:
        stmt = select(*_RECORD_COLS).where(TuningRecord.device_id == device_id)
    stmt = stmt.order_by(TuningRecord.workload_id, TuningRecord.mean_s.is_(None), TuningRecord.mean_s)
    # All skeletons first: the stream below holds a cursor open, and they are few.
    records = reader(conn, preload=stmt.with_only_columns(TuningRecord.skeleton_id).order_by(None).distinct())
    for row in conn.execute(stmt, execution_options={"yield_per": 2000}):
        record = records.record(row, keep=unsound)
        if record is not None:
            yield record
    if not unsound:
        records.warn()


def count_records(conn: Connection, device_id: int) -> int:
    stmt = select(func.count()).select_from(TuningRecord).where(TuningRecord.device_id == device_id)
    return conn.execute(stmt).scalar() or 0


def workloads_by_id(conn: Connection, ids: list[int]) -> dict[int, StoredWorkload]:
    stmt = select(
        Workload.id, Workload.shash, Workload.module_equality, Workload.mod_json_z, Workload.args_info_json
    ).where(Workload.id.in_(ids))
    found, skipped = {}, []
    for i, s, m, z, a in conn.execute(stmt):
        try:
            found[i] = StoredWorkload(i, s, m, inflate(z, f"workload {i}"), parse(a, f"workload {i}'s arguments"))
        except CorruptRow as e:
            skipped.append(str(e))
    if skipped:  # its records are then skipped by whoever needs the workload: they cannot be applied to it
        warnings.warn(f"{skipped[0]}; it is skipped (`registry check` marks its records)", RegistryWarning, 3)
    return found


def workload_id(conn: Connection, shash: str, module_equality: str) -> int | None:
    stmt = select(Workload.id).where(Workload.shash == shash, Workload.module_equality == module_equality)
    return conn.execute(stmt).scalar()


def donor_records(conn: Connection, workload_ids: list[int], per_device: int, target_kind: str) -> list[DonorRecord]:
    """The ``per_device`` fastest ok records of each workload on each device of ``target_kind`` it was measured on."""
    rank = (
        func.row_number()
        .over(
            partition_by=(TuningRecord.workload_id, TuningRecord.device_id),
            order_by=(TIER, TuningRecord.mean_s, TuningRecord.id),
        )
        .label("rank")
    )
    ranked = (
        select(*_RECORD_COLS, TuningRecord.device_id, TuningRecord.source, rank)
        .join(Device, Device.id == TuningRecord.device_id)
        .where(TuningRecord.workload_id.in_(workload_ids), TuningRecord.mean_s.is_not(None))
        .where(TuningRecord.trust != "disputed")  # donors are measured again here, but not a disproved claim
        .where(Device.kind == target_kind)
        .subquery()
    )
    stmt = (
        select(ranked, Workload.task_name, Workload.flops)
        .join(Workload, Workload.id == ranked.c.workload_id)
        .where(ranked.c.rank <= per_device)
    )
    records = reader(conn)
    out = []
    for row in conn.execute(stmt):
        *cols, device_id, source, rnk, task_name, flops = row
        record = records.record(cols)
        if record is not None:
            out.append(DonorRecord(record, device_id, rnk, task_name, flops, source))
    records.warn()
    return out


def tuning_state(conn: Connection, workload_id: int, device_id: int) -> TuningState:
    stmt = select(TuningRecord.trace_hash, TuningRecord.run_secs_json, TuningRecord.source).where(
        TuningRecord.workload_id == workload_id, TuningRecord.device_id == device_id
    )
    rows = conn.execute(stmt).all()
    return TuningState(
        tuned=sum(1 for _, _, source in rows if source == "tuned"),
        traces={h: secs for h, text, _ in rows if isinstance(secs := _loads(text), list)},
    )


def record_provenance(conn: Connection, record_id: int) -> RecordProvenance:
    cols = (
        *_RECORD_COLS,
        Workload.shash,
        Workload.mod_json_z,
        TuningRecord.source,
        TuningRecord.donor_record_id,
        TuningRecord.team,
        TuningRecord.model,
        TuningRecord.host,
        TuningRecord.tvm_version,
        TuningRecord.created_at,
        TuningRecord.device_id,
    )
    stmt = select(*cols).join(Workload, Workload.id == TuningRecord.workload_id).where(TuningRecord.id == record_id)
    row = conn.execute(stmt).first()
    if row is None:
        raise NotFoundError(f"no record {record_id} in the registry")
    shash, mod_z, source, donor_id, team, model, host, tvm_version, created, device_id = row[len(_RECORD_COLS) :]
    donor = None
    if donor_id is not None:
        found = conn.execute(
            select(Workload.shash, Device.name)
            .select_from(TuningRecord)
            .join(Workload, Workload.id == TuningRecord.workload_id)
            .join(Device, Device.id == TuningRecord.device_id)
            .where(TuningRecord.id == donor_id)
        ).first()
        if found is not None:
            donor = f"{found[0]} on {found[1]}"
    records = reader(conn)
    record = records.record(row[: len(_RECORD_COLS)])
    if record is None:
        raise CorruptRow(f"{records.skipped.first}; `registry check` marks such records")
    return RecordProvenance(
        record,
        shash,
        inflate(mod_z, f"workload {shash}"),
        source,
        donor_id,
        donor,
        team,
        model,
        host,
        tvm_version,
        created.isoformat() if created is not None else "",
        device_id,
    )


# -- what export, predictor training and the similarity index read -----------------------------------------------


def device_workload_ids(conn: Connection, device_id: int, *, best_only: bool = False) -> list[int]:
    """The workloads a device has records of (with ``best_only``: ok records), in id order."""
    if best_only:
        stmt = select(BestRecord.workload_id).where(BestRecord.device_id == device_id)
    else:
        stmt = select(TuningRecord.workload_id).where(TuningRecord.device_id == device_id).distinct()
    return sorted(conn.execute(stmt).scalars())


def ok_record_counts(conn: Connection, device_id: int) -> dict[int, tuple[str, int]]:
    """Workload id -> (task name, ok records) of every workload with ok records on a device, in id order."""
    stmt = (
        select(TuningRecord.workload_id, Workload.task_name, func.count())
        .join(Workload, Workload.id == TuningRecord.workload_id)
        .where(TuningRecord.device_id == device_id, TuningRecord.mean_s.is_not(None))
        .group_by(TuningRecord.workload_id, Workload.task_name)
        .order_by(TuningRecord.workload_id)
    )
    return {w: (t, n) for w, t, n in conn.execute(stmt)}


def indexed_set(conn: Connection) -> IndexedSet:
    """The summary of the workloads with good records (a ``best_record`` on some device)."""
    ids = select(BestRecord.workload_id.label("id")).distinct().subquery()
    n, total, top = conn.execute(
        select(func.count(), func.coalesce(func.sum(ids.c.id), 0), func.coalesce(func.max(ids.c.id), 0))
    ).one()
    return IndexedSet(int(n), int(total), int(top))


def indexed_embeddings(conn: Connection) -> list[tuple[int, bytes]]:
    """(workload id, embedding as float32 bytes) of every workload with good records, in id order."""
    good = select(BestRecord.workload_id).distinct()
    stmt = select(Workload.id, Workload.embedding).where(Workload.id.in_(good)).order_by(Workload.id)
    return [(i, bytes(e)) for i, e in conn.execute(stmt)]
