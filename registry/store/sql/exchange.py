"""What one registry hands another: its records with full provenance, by stable identities instead of local ids.

``registry export --bundle`` writes this stream to a file (``registry/share/bundle.py``), ``registry sync`` hands it
straight to the other registry; both read it with ``read_exchange`` (``Store.read_exchange``) and write it through
``registry.share.exchange_import`` (checks, with TVM) and ``Store.ingest_batches`` (``write_extras``: models,
donors, sync progress). Nothing here imports TVM.

Identities that travel: a device by its key (sha256 of target, threads, hardware and TVM release), a workload by its
structural hash and module-equality mode plus its module (the receiver recomputes the hash), a trace by its skeleton's
hash and decisions, a record by (workload, device, trace hash, origin), a model by its file's sha256 and input shapes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from typing import Any, TypeVar

import orjson
from sqlalchemy import Connection, Select, bindparam, func, or_, select, tuple_, update
from sqlalchemy.orm import aliased

from registry.store.decode import Skipped, inflate, parse
from registry.store.rows import IngestExtras, canonical_json
from registry.store.sql.efforts import efforts, merge
from registry.store.sql.ingest import insert, registry_id, upsert_model, whole_trace_hash
from registry.store.sql.models import (
    BestRecord,
    Device,
    Model,
    ModelTask,
    SyncState,
    TraceSkeleton,
    TuningRecord,
    Workload,
)
from registry.store.values import (
    CHUNK,
    ExchangeFilters,
    ExchangeSet,
    ExDevice,
    ExEffort,
    ExModel,
    ExRecord,
    ExWorkload,
)

T = TypeVar("T")
MAX_LISTED = 5000  # ids a query lists (SQLite allows 32,766 parameters, PostgreSQL 65,535)


def _record_filter(
    f: ExchangeFilters, after_id: int, device_ids: list[int] | None, tasks_best: list[int] | Select
) -> list[Any]:
    where: list[Any] = [TuningRecord.id > after_id]
    if device_ids is not None:
        where.append(TuningRecord.device_id.in_(device_ids))
    if f.team is not None:
        where.append(TuningRecord.team == f.team)
    if f.model is not None:
        # A model's records: those its runs wrote, and the best record of each of its tasks on each device whichever
        # model's run wrote it (a workload shared by two models is tuned once), as the model page counts coverage.
        # The best records' ids are a list, not a subquery: PostgreSQL then ORs two index scans instead of scanning.
        where.append(or_(TuningRecord.model == f.model, TuningRecord.id.in_(tasks_best)))
    if f.since is not None:
        where.append(TuningRecord.created_at >= f.since)
    if f.best_only:
        where.append(TuningRecord.id.in_(select(BestRecord.record_id)))
    return where


def read_exchange(conn: Connection, f: ExchangeFilters, *, after_id: int = 0, limit: int | None = None) -> ExchangeSet:
    """The records matching ``f`` with ids above ``after_id`` (the ``limit`` lowest ids of them, if given: one page
    of a pull), and what they refer to.

    ``conn`` must see one snapshot for the whole read (``Store.read(snapshot=True)``), and stay open while
    ``records`` is consumed."""
    device_ids = None
    if f.device_keys is not None:
        device_ids = list(conn.execute(select(Device.id).where(Device.key.in_(f.device_keys))).scalars())
    tasks_best: list[int] | Select = []
    if f.model is not None:
        tasks_best = (
            select(BestRecord.record_id)
            .join(ModelTask, ModelTask.workload_id == BestRecord.workload_id)
            .join(Model, Model.id == ModelTask.model_id)
            .where(Model.name == f.model)
        )
        listed = list(conn.execute(tasks_best.limit(MAX_LISTED + 1)).scalars())
        tasks_best = listed if len(listed) <= MAX_LISTED else tasks_best  # a list that long: a subquery after all
    where = _record_filter(f, after_id, device_ids, tasks_best)
    if limit is not None:  # the page ends at the limit-th matching id: one indexed probe, then a range like any other
        stmt = select(TuningRecord.id).where(*where).order_by(TuningRecord.id).offset(max(limit, 1) - 1).limit(1)
        end = conn.execute(stmt).scalar()
        if end is not None:
            where.append(TuningRecord.id <= end)
    n, last = conn.execute(select(func.count(), func.max(TuningRecord.id)).where(*where)).one()
    out = ExchangeSet(origin=registry_id(conn), n_records=n or 0, last_record_id=last or after_id)
    if not n:
        return out
    wl_ids = set(conn.execute(select(TuningRecord.workload_id).where(*where).distinct()).scalars())
    dev_ids = set(conn.execute(select(TuningRecord.device_id).where(*where).distinct()).scalars())
    # The workloads and devices of the travelling records' donors travel too, so that a set names no donor it does
    # not hold (the receiving side refuses one that does: it could name anything).
    donor = aliased(TuningRecord)
    donors = conn.execute(
        select(donor.workload_id, donor.device_id).join(TuningRecord, TuningRecord.donor_record_id == donor.id)
        .where(*where).distinct()
    ).all()  # fmt: skip
    wl_ids |= {w for w, _ in donors}
    dev_ids |= {d for _, d in donors}
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
    # A row that cannot be decoded is left out, with the records that need it, and one warning says so: a crafted
    # row must not stop every export and sync of a shared registry (registry.store.decode).
    skips = Skipped("row(s) left out, corrupt, with the records that need them")
    idents = {}
    for wid, shash, mode, mod_z in conn.execute(
        select(Workload.id, Workload.shash, Workload.module_equality, Workload.mod_json_z)
        .where(Workload.id.in_(wl_ids))
        .order_by(Workload.id)
    ):
        with skips:
            out.workloads.append(ExWorkload(shash, mode, inflate(mod_z, f"workload {wid}")))
            idents[wid] = (shash, mode)
    keys = {}
    device_cols = (Device.id, Device.key, Device.target_json, Device.num_threads, Device.host_model, Device.tvm_version)
    for did, key, target, threads, host_model, tvm in conn.execute(
        select(*device_cols).where(Device.id.in_(dev_ids)).order_by(Device.id)
    ):
        with skips:
            out.devices.append(ExDevice(key, parse(target, f"device {did}'s target"), threads, host_model, tvm))
            keys[did] = key
    by_model: dict[int, list] = {}
    for t in tasks:
        if t.workload_id in idents:
            by_model.setdefault(t.model_id, []).append((idents[t.workload_id], t.task_name, t.weight))
    model_cols = (Model.id, Model.name, Model.sha256, Model.input_shapes_json)
    for mid, name, sha, shapes in conn.execute(select(*model_cols).where(Model.id.in_(model_ids)).order_by(Model.id)):
        with skips:
            out.models.append(ExModel(name, sha, parse(shapes, f"model {name}'s shapes"), by_model.get(mid, [])))
    out.efforts = _efforts(conn, idents, keys)
    skel_ids = select(TuningRecord.skeleton_id).where(*where).distinct()
    for h, insts_z in conn.execute(
        select(TraceSkeleton.hash, TraceSkeleton.insts_json_z).where(TraceSkeleton.id.in_(skel_ids))
    ):
        with skips:
            out.skeletons[h] = _insts(insts_z, h)
    out.records = lambda: _records(conn, where, idents, keys, out.skeletons, skips)
    return out


def _efforts(conn: Connection, idents: dict, keys: dict) -> list[ExEffort]:
    """The recorded effort on the travelling workloads and devices."""
    out = []
    for did, key in keys.items():
        for wid, e in efforts(conn, list(idents), did).items():
            out.append(ExEffort(idents[wid], key, e.trials, e.seconds, e.curve, e.plateau))
    return out


def _insts(insts_z: bytes, h: str) -> str:
    """A skeleton's instructions, checked to be JSON (a bundle carries them as text)."""
    text = inflate(insts_z, f"trace skeleton {h[:12]}")
    parse(text, f"trace skeleton {h[:12]}")
    return text


def _records(
    conn: Connection, where: list[Any], idents: dict, keys: dict, skeletons: dict, skips: Skipped
) -> Iterator[list[ExRecord]]:
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
    chunks = _sqlite_chunks(conn, stmt) if conn.dialect.name == "sqlite" else _row_chunks(conn, stmt)
    for rows in _one_ahead(chunks):
        chunk = []
        for (rid, wid, did, skel, decisions, secs, source, origin, team, model, host, tool, created,
             d_shash, d_mode, d_key, d_hash, d_origin) in rows:  # fmt: skip
            if wid not in idents or did not in keys or skel not in skeletons:
                skips.add(f"record {rid} needs a row left out")
                continue
            with skips:
                chunk.append(ExRecord(
                    rid, idents[wid], keys[did], skel, decisions, parse(secs, f"the latencies of record {rid}"),
                    source, origin, team, model, host, tool, created,
                    ((d_shash, d_mode), d_key, d_hash, d_origin) if d_shash is not None else None,
                ))  # fmt: skip
        yield chunk
    skips.warn()


def _one_ahead(chunks: Iterator[T]) -> Iterator[T]:
    """``chunks``, each next one read by a helper thread while the caller works on the current one.

    A chunk's query runs in the database driver with the GIL released (a quarter of the reading thread's time in a
    10^6-record sync from SQLite): read ahead, it overlaps the checks of the chunk before instead of adding to them.
    The connection is used by one thread at a time: the caller does not touch it while it iterates, and leaving
    early waits for the read in flight before the connection can be closed."""
    with ThreadPoolExecutor(1, thread_name_prefix="registry-read") as ahead:
        pending = ahead.submit(next, chunks, None)
        while (chunk := pending.result()) is not None:
            pending = ahead.submit(next, chunks, None)
            yield chunk


def _row_chunks(conn: Connection, stmt: Select) -> Iterator[Sequence[Any]]:
    result = conn.execute(stmt.execution_options(yield_per=CHUNK))
    while rows := result.fetchmany(CHUNK):
        yield rows


def _sqlite_chunks(conn: Connection, stmt: Select) -> Iterator[list[list[Any]]]:
    """SQLite: each chunk of rows as one JSON array, built by SQLite and parsed by orjson.

    Python's sqlite3 releases the GIL for every row it steps. While the write-behind thread runs Python, each of
    those re-acquisitions waits for it to let go, for a third of a 200,000-record sync. One aggregate
    row per chunk steps once, and SQLite builds it with the GIL released."""
    chunk = stmt.where(TuningRecord.id > bindparam("after")).limit(CHUNK).subquery()
    agg = select(func.json_group_array(func.json_array(*chunk.c)), func.max(chunk.c.id))
    created = chunk.c.keys().index("created_at")  # stored as text
    after = 0
    while True:
        text, last = conn.execute(agg, {"after": after}).one()
        if last is None:
            return
        rows = orjson.loads(text)
        rows.sort(key=itemgetter(0))  # an aggregate's input order is not promised
        for row in rows:
            row[created] = dt.datetime.fromisoformat(row[created])
        yield rows
        after = last


# -- the write side: what a bundle or a sync adds besides records, in the records' transaction --------------------


def write_extras(conn: Connection, extras: IngestExtras, ids: dict[tuple[str, str], int]) -> None:
    """Models, donor links and sync progress (``IngestExtras``); ``ids``: local workload ids by local ident."""
    local = {sent: ids[mine] for sent, mine in extras.local.items() if mine in ids}
    for name, sha256, shapes, tasks in extras.models:
        by_id = {local[sent]: (task, weight) for sent, task, weight in tasks if sent in local}
        upsert_model(conn, name, sha256, shapes, by_id)
    if extras.donors:
        _link_donors(conn, extras.donors, local, {mine: ids[mine] for mine in extras.local.values() if mine in ids})
    if extras.efforts:
        merge(conn, extras.efforts, local)
    if extras.sync_mark is not None:
        source_id, key, last = extras.sync_mark
        stmt = insert(conn, SyncState).values(source_id=source_id, filters_key=key, last_record_id=last)
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["source_id", "filters_key"],
                set_=dict(last_record_id=stmt.excluded.last_record_id, synced_at=func.current_timestamp()),
            )
        )


def last_synced(conn: Connection, source_id: str, key: str) -> int:
    """The highest record id of ``source_id`` copied here by a sync with filters ``key`` (0: none yet)."""
    stmt = select(SyncState.last_record_id).where(SyncState.source_id == source_id, SyncState.filters_key == key)
    return conn.execute(stmt).scalar() or 0


def _link_donors(conn: Connection, donors: list, by_sent: dict, by_mine: dict) -> None:
    """Point transferred records at their donors, found by identity, where both are stored here."""
    here = registry_id(conn)
    keys = {r.device.key for r, _ in donors} | {d[1] for _, d in donors}
    device_ids = dict(conn.execute(select(Device.key, Device.id).where(Device.key.in_(keys))).all())
    links = []
    for rec, (d_workload, d_device, d_hash, d_origin) in donors:
        wid, did = by_mine.get(rec.workload), device_ids.get(rec.device.key)
        d_wid, d_did = by_sent.get(d_workload), device_ids.get(d_device)
        if None in (wid, did, d_wid, d_did):
            continue  # the donor's workload or device is not stored here: the record keeps its provenance only
        trace = whole_trace_hash(rec.insts_json, canonical_json(rec.trace[1]))
        links.append(((wid, did, trace, rec.origin or here), (d_wid, d_did, d_hash, d_origin)))
    key = tuple_(TuningRecord.workload_id, TuningRecord.device_id, TuningRecord.trace_hash, TuningRecord.origin)
    for start in range(0, len(links), 200):
        chunk = links[start : start + 200]
        wanted = list({k for pair in chunk for k in pair})
        cols = (TuningRecord.workload_id, TuningRecord.device_id, TuningRecord.trace_hash, TuningRecord.origin)
        found = {tuple(row[1:]): row[0] for row in conn.execute(select(TuningRecord.id, *cols).where(key.in_(wanted)))}
        for rec, donor in chunk:
            if rec in found and donor in found:
                conn.execute(
                    update(TuningRecord)
                    .where(TuningRecord.id == found[rec], TuningRecord.donor_record_id.is_(None))
                    .values(donor_record_id=found[donor])
                )
