"""Writing devices, workloads and records: idempotent upserts, in one transaction per call."""

from __future__ import annotations

import functools
import hashlib
import json
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, and_, case, or_, select, tuple_, update

from registry.errors import BadInputError, DatabaseError
from registry.store.embedding import embed
from registry.store.rows import DeviceSpec, IngestResult, RecordIn, WorkloadIn, canonical_json, shape_text, utc
from registry.store.sql.models import (
    SOURCES,
    BestRecord,
    Device,
    Model,
    ModelTask,
    PlainTask,
    RegistryInfo,
    TraceSkeleton,
    TuningRecord,
    Workload,
    WorkloadArg,
)
from registry.store.sql.trust import TIER as tier
from registry.store.traces import trace_hash, whole_trace_hash
from registry.store.trust import TRUST_LEVELS, TRUST_TIER

# Bound parameters per statement stay well under SQLite's 32766 and PostgreSQL's 65535.
CHUNK = 1000


def insert(conn: Connection, model):
    """The dialect's INSERT, which knows ON CONFLICT. The registry writes only to SQLite and PostgreSQL."""
    name = conn.dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(model)
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(model)
    raise DatabaseError(f"the registry writes to SQLite or PostgreSQL, not {name}")


def _chunks(rows: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def fitted(value: str | None, column, what: str, *, cut: bool = False) -> str | None:
    """``value`` within ``column``'s length, the same on every database (SQLite enforces none, PostgreSQL refuses
    what is longer). ``cut``: a name the registry derives (a task's, a device's) is shortened, and kept distinct by a
    digest of the whole; anything else too long is refused in one line (BadInputError)."""
    limit = column.type.length
    if value is None or len(value) <= limit:
        return value
    if cut:
        return value[: limit - 9] + "~" + hashlib.sha256(value.encode()).hexdigest()[:8]
    raise BadInputError(f"{what} is {len(value)} characters long; a registry keeps at most {limit}")


def upsert_devices(conn: Connection, specs: Iterable[DeviceSpec]) -> dict[str, int]:
    """Ids of ``specs`` by key, creating the devices not seen before."""
    unique = {s.key: s for s in specs}
    if not unique:
        return {}
    rows = [
        dict(
            key=s.key,
            name=fitted(s.name, Device.name, "the device name", cut=True),
            kind=fitted(s.kind, Device.kind, "the target kind"),
            target_json=s.target_json,
            mcpu=fitted(s.mcpu, Device.mcpu, "the target's mcpu", cut=True),
            num_cores=s.num_cores,
            num_threads=s.num_threads,
            host_model=fitted(s.host_model, Device.host_model, "the device's host model"),
            tvm_version=fitted(s.tvm_version, Device.tvm_version, "the TVM version"),
        )
        for s in sorted(unique.values(), key=lambda s: s.key)
    ]
    conn.execute(insert(conn, Device).on_conflict_do_nothing(index_elements=["key"]), rows)
    found = conn.execute(select(Device.key, Device.id).where(Device.key.in_(unique))).all()
    return dict(found)


def upsert_workloads(conn: Connection, workloads: Sequence[WorkloadIn], result: IngestResult) -> dict:
    """Insert the workloads not present yet (with their argument rows); return ids by (shash, module_equality)."""
    unique = {w.ident: w for w in workloads}
    ids: dict[tuple[str, str], int] = {}
    for chunk in _chunks(sorted(unique.values(), key=lambda w: w.ident)):
        rows = [_workload_row(w) for w in chunk]
        stmt = insert(conn, Workload).on_conflict_do_nothing(index_elements=["shash", "module_equality"])
        new = conn.execute(stmt.returning(Workload.id, Workload.shash, Workload.module_equality), rows).all()
        result.workloads_new += len(new)
        arg_rows = []
        for wid, shash, mode in new:
            ids[(shash, mode)] = wid
            for pos, (shape, dtype) in enumerate(unique[(shash, mode)].signature.args):
                shape_ = fitted(shape_text(shape), WorkloadArg.shape, "an argument's shape", cut=True)
                arg_rows.append(
                    dict(workload_id=wid, position=pos, shape=shape_, dtype=fitted(dtype, WorkloadArg.dtype, "a dtype"))
                )
        if arg_rows:
            conn.execute(insert(conn, WorkloadArg), arg_rows)
    result.workloads_present += len(unique) - len(ids)
    missing = [k for k in unique if k not in ids]
    ids.update(workload_ids(conn, missing))
    return ids


def _workload_row(w: WorkloadIn) -> dict[str, Any]:
    sig = w.signature
    return dict(
        shash=w.shash,
        module_equality=w.module_equality,
        mod_json_z=zlib.compress(w.mod_json.encode()),
        args_info_json=canonical_json(w.args_info),
        op_kind=fitted(sig.op_kind, Workload.op_kind, "an operator kind"),
        task_name=fitted(sig.task_name, Workload.task_name, "a task name", cut=True),
        iter_kinds=fitted(sig.iter_kinds, Workload.iter_kinds, "a workload's loop kinds", cut=True),
        extents_json=json.dumps(list(sig.extents)),
        args_json=json.dumps([{"shape": list(s), "dtype": d} for s, d in sig.args]),
        flops=float(sig.flops),
        embedding=embed(sig).tobytes(),
        tvm_version=fitted(w.tvm_version, Workload.tvm_version, "the TVM version"),
    )


def workload_ids(conn: Connection, idents: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
    ids = {}
    for chunk in _chunks(list(idents), 400):
        stmt = select(Workload.shash, Workload.module_equality, Workload.id).where(
            tuple_(Workload.shash, Workload.module_equality).in_(chunk)
        )
        ids.update({(s, m): i for s, m, i in conn.execute(stmt)})
    return ids


def split_trace(r: RecordIn) -> tuple[str, str]:
    """Canonical JSON of a record's trace instructions and of its decisions. Raises BadInputError for a non-trace."""
    trace = r.trace
    if not (isinstance(trace, list) and len(trace) == 2 and all(isinstance(p, list) for p in trace)):
        raise BadInputError("a trace must be [instructions, decisions]")
    return r.insts_json or canonical_json(trace[0]), canonical_json(trace[1])


def registry_id(conn: Connection) -> str:
    """This registry's id: the origin of the records it measures."""
    found = conn.execute(select(RegistryInfo.registry_id).where(RegistryInfo.id == 1)).scalar()
    if found is None:  # cannot happen after migration 0003, which writes it
        raise DatabaseError("the registry has no id (table registry_info is empty); run `registry db upgrade`")
    return found


# A record's row: its columns in this order (the COPY's), each with its PostgreSQL type for a binary COPY (which has
# psycopg's C dumpers write them, and PostgreSQL parse none). ``created_at`` is left to the database for records
# measured now (a write's records either all carry their time or none does).
_ROW_TYPES = {
    "workload_id": "int8", "device_id": "int4", "trace_hash": "text", "skeleton_id": "int8", "decisions_json": "text",
    "run_secs_json": "text", "mean_s": "float8", "ok": "bool", "source": "text", "donor_record_id": "int8",
    "team": "text", "model": "text", "host": "text", "tvm_version": "text", "tool_version": "text", "origin": "text",
    "trust": "text", "created_at": "timestamptz",
}  # fmt: skip
ROW_COLUMNS = tuple(_ROW_TYPES)


@dataclass(slots=True)
class PreparedRecords:
    """A batch of records made rows, but for the ids only the write's transaction knows: ``prepare_records`` runs in
    the thread that reads and checks (an import or a sync), ``insert_records`` in the one that writes behind it,
    which then only looks ids up and talks to the database (store/write_behind.py)."""

    # ROW_COLUMNS' values, unique and in key order, with the workload's (shash, module_equality), the device's key
    # and the instructions' JSON where their ids go
    rows: list[tuple]
    devices: dict[str, DeviceSpec]
    workloads: set[tuple[str, str]]
    timed: bool  # the rows end with their created_at
    repeated: int  # records of the batch that repeat one before them


def prepare_records(records: Sequence[RecordIn], here: str) -> PreparedRecords:
    """``records`` as rows; ``here``: this registry's id, the origin of records measured here."""
    timed = bool(records) and records[0].created_at is not None
    if any((r.created_at is not None) != timed for r in records):
        raise ValueError("records of one write either all carry their measurement time or none does")
    rows: dict[tuple[tuple[str, str], str, str, str], tuple] = {}
    devices: dict[str, DeviceSpec] = {}
    for r in records:
        if r.source not in SOURCES:
            raise BadInputError(f"unknown record source {r.source!r}; expected one of {', '.join(SOURCES)}")
        trust = r.trust_level
        if trust not in TRUST_LEVELS:
            raise BadInputError(f"unknown trust level {trust!r}; expected one of {', '.join(TRUST_LEVELS)}")
        insts, decisions = split_trace(r)
        device = devices.setdefault(r.device.key, r.device)
        # A record written without an origin was measured by this process; what a record that travelled says of its
        # own origin is a claim, and never raises its trust (a bundle naming this registry stays "imported").
        origin = r.origin or here
        key = (r.workload, device.key, whole_trace_hash(insts, decisions), origin)
        if key in rows:
            continue
        row = (
            r.workload, device.key, key[2], insts, decisions, orjson.dumps(r.run_secs).decode(), r.mean_s, r.ok,
            r.source, r.donor_record_id, _team(r.team), _model(r.model), _host(r.host), device.tvm_version,
            _tool(r.tool_version), _origin(origin), trust,
        )  # fmt: skip
        rows[key] = (*row, utc(r.created_at)) if timed else row
    # Rows go in key order within a batch, so concurrent writers mostly take locks in one order; a deadlock that
    # still happens across batches is retried from the start by Store.transact.
    ordered = [rows[k] for k in sorted(rows)]
    return PreparedRecords(ordered, devices, {k[0] for k in rows}, timed, len(records) - len(rows))


def _limited(column, what: str, cut: bool = False):
    """``fitted`` for one column, remembering what it passed (a batch repeats a few values many times)."""

    @functools.lru_cache(maxsize=1024)
    def fit(value: str | None) -> str | None:
        return fitted(value, column, what, cut=cut)

    return fit


_team = _limited(TuningRecord.team, "the team name")
_model = _limited(TuningRecord.model, "the model name")
_host = _limited(TuningRecord.host, "the host name", cut=True)
_tool = _limited(TuningRecord.tool_version, "the tool version")
_origin = _limited(TuningRecord.origin, "a record's origin")


def insert_records(
    conn: Connection,
    batch: PreparedRecords,
    workload_ids_: dict[tuple[str, str], int],
    device_ids: dict[str, int],
    result: IngestResult,
) -> None:
    """Insert the batch's records not present yet and keep ``best_record`` current for their (workload, device)
    pairs. ``workload_ids_`` and ``device_ids`` hold the batch's workloads and devices."""
    unknown = batch.workloads - workload_ids_.keys()
    if unknown:
        raise BadInputError(f"record refers to workload {min(unknown)[0]}, which is not in the registry")
    skeleton_ids = _skeleton_ids(conn, {row[3] for row in batch.rows})
    rows = [(workload_ids_[row[0]], device_ids[row[1]], row[2], skeleton_ids[row[3]]) + row[4:] for row in batch.rows]
    result.records_present += batch.repeated
    columns = ROW_COLUMNS if batch.timed else ROW_COLUMNS[:-1]
    best: dict[tuple[int, int], dict[str, Any]] = {}
    for chunk, new in _insert_new(conn, columns, rows):
        result.records_new += len(new)
        result.records_present += len(chunk) - len(new)
        for rid, wid, did, mean_s, trust in new:
            tier = TRUST_TIER.get(trust)
            if mean_s is None or tier is None:
                continue
            cur = best.setdefault(
                (wid, did), dict(workload_id=wid, device_id=did, record_id=rid, mean_s=mean_s, n_records=0, tier=tier)
            )
            cur["n_records"] += 1
            if (tier, mean_s) < (cur["tier"], cur["mean_s"]):
                cur.update(record_id=rid, mean_s=mean_s, tier=tier)
    merge_best(conn, [best[k] for k in sorted(best)])


# At least this many rows go through COPY on PostgreSQL: one round trip, no SQL text to build and parse per row
# (psycopg's parsing of a 1000-row INSERT ... VALUES took most of the time of a sync).
COPY_ROWS = 2000
_RETURNING = (
    TuningRecord.id,
    TuningRecord.workload_id,
    TuningRecord.device_id,
    TuningRecord.mean_s,
    TuningRecord.trust,
)


def _insert_new(conn: Connection, columns: Sequence[str], rows: list[tuple]) -> Iterator[tuple[Sequence[tuple], list]]:
    """Insert the rows (values of ``columns``) not present yet, in batches: each batch, with (id, workload, device,
    mean, trust) of the rows of it that were inserted."""
    if conn.dialect.name == "postgresql" and len(rows) >= COPY_ROWS:
        yield rows, _copy_new(conn, columns, rows)
        return
    stmt = insert(conn, TuningRecord).on_conflict_do_nothing(
        index_elements=["workload_id", "device_id", "trace_hash", "origin"]
    )
    for chunk in _chunks(rows):
        params = [dict(zip(columns, row, strict=True)) for row in chunk]
        yield chunk, [tuple(r) for r in conn.execute(stmt.returning(*_RETURNING), params).all()]


def _copy_new(conn: Connection, columns: Sequence[str], rows: Sequence[tuple]) -> list[tuple]:
    """PostgreSQL: a binary COPY into a temporary table of this transaction, then one INSERT ... SELECT ... ON
    CONFLICT."""
    names = ", ".join(columns)
    raw = conn.connection.driver_connection  # the psycopg connection, inside this transaction
    with raw.cursor() as cur:
        cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS incoming_record ON COMMIT DROP AS SELECT {', '.join(ROW_COLUMNS)} "
            "FROM tuning_record WITH NO DATA"
        )
        cur.execute("TRUNCATE incoming_record")
        with cur.copy(f"COPY incoming_record ({names}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types([_ROW_TYPES[c] for c in columns])
            for row in rows:
                copy.write_row(row)
        cur.execute(
            f"INSERT INTO tuning_record ({names}) SELECT {names} FROM incoming_record"
            " ORDER BY workload_id, device_id, trace_hash, origin"  # lock order, as for the INSERTs above
            " ON CONFLICT (workload_id, device_id, trace_hash, origin) DO NOTHING"
            " RETURNING id, workload_id, device_id, mean_s, trust"
        )
        return cur.fetchall()


def _skeleton_ids(conn: Connection, texts: set[str]) -> dict[str, int]:
    """Ids of these instruction lists (canonical JSON), adding the ones not stored yet."""
    by_hash = {trace_hash(text): text for text in texts}
    new = [dict(hash=h, insts_json_z=zlib.compress(t.encode())) for h, t in sorted(by_hash.items())]
    if new:
        conn.execute(insert(conn, TraceSkeleton).on_conflict_do_nothing(index_elements=["hash"]), new)
    ids: dict[str, int] = {}
    for chunk in _chunks(sorted(by_hash), 400):
        found = conn.execute(select(TraceSkeleton.hash, TraceSkeleton.id).where(TraceSkeleton.hash.in_(chunk)))
        ids.update({by_hash[h]: sid for h, sid in found})
    return ids


def merge_best(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Fold this batch's best per pair into ``best_record``: atomic per row, so concurrent writers cannot lose one.
    A more trusted tier wins whatever the latency; within a tier, the faster record."""
    for chunk in _chunks(rows):
        stmt = insert(conn, BestRecord)
        new = stmt.excluded
        better = or_(new.tier < BestRecord.tier, and_(new.tier == BestRecord.tier, new.mean_s < BestRecord.mean_s))
        stmt = stmt.on_conflict_do_update(
            index_elements=["workload_id", "device_id"],
            set_=dict(
                record_id=case((better, new.record_id), else_=BestRecord.record_id),
                mean_s=case((better, new.mean_s), else_=BestRecord.mean_s),
                tier=case((better, new.tier), else_=BestRecord.tier),
                n_records=BestRecord.n_records + new.n_records,
            ),
        )
        conn.execute(stmt, chunk)


def keep_faster(conn: Connection, records: Sequence[RecordIn], here: str) -> list[bool]:
    """Per record measured here (no origin of its own) whose schedule is already stored as measured here: its
    measurement replaces the stored one where it is faster (lower mean; an ok one beats a failed one), and
    ``best_record`` follows. True for each record whose measurement replaced the stored one.

    The faster one, not the newer one, because TVM's JSONDatabase keeps every commit and answers with the lowest
    mean, and a shared machine's noise only ever slows a run down. The row keeps its id, so donor links and sync
    marks stay valid; a registry that already pulled the record keeps the measurement it pulled."""
    idents = sorted({r.workload for r in records})
    wids = workload_ids(conn, idents) if idents else {}
    keys = {r.device.key for r in records}
    dids = dict(conn.execute(select(Device.key, Device.id).where(Device.key.in_(keys))).all()) if keys else {}
    origin = _origin(here)
    replaced = []
    for r in records:
        wid, did = wids.get(r.workload), dids.get(r.device.key)
        if r.origin is not None or not r.ok or wid is None or did is None:
            replaced.append(False)
            continue
        stored = conn.execute(
            select(TuningRecord.id, TuningRecord.mean_s, TuningRecord.trust)
            .where(
                TuningRecord.workload_id == wid,
                TuningRecord.device_id == did,
                TuningRecord.trace_hash == whole_trace_hash(*split_trace(r)),
                TuningRecord.origin == origin,
            )
            .with_for_update()  # PostgreSQL: a concurrent commit of the same schedule waits, then compares with this
        ).first()
        if stored is None or (stored.mean_s is not None and stored.mean_s <= r.mean_s):
            replaced.append(False)
            continue
        conn.execute(
            update(TuningRecord)
            .where(TuningRecord.id == stored.id)
            .values(run_secs_json=orjson.dumps(r.run_secs).decode(), mean_s=r.mean_s, ok=True)
        )
        replaced.append(True)
        tier = TRUST_TIER.get(stored.trust)
        if tier is not None:  # a failed record becoming ok is one more record the pair's best is chosen from
            best = dict(workload_id=wid, device_id=did, record_id=stored.id, mean_s=r.mean_s, tier=tier)
            merge_best(conn, [{**best, "n_records": int(stored.mean_s is None)}])
    return replaced


def recompute_best(conn: Connection, pairs: Iterable[tuple[int, int]]) -> None:
    """Choose the preferred record of each (workload, device) pair again from its records: after a record's trust
    changed (``registry verify``), which the incremental merge cannot undo."""
    for chunk in _chunks(sorted(set(pairs)), 400):
        pair = tuple_(BestRecord.workload_id, BestRecord.device_id)
        conn.execute(BestRecord.__table__.delete().where(pair.in_(chunk)))
        eligible = (
            select(TuningRecord.id, TuningRecord.workload_id, TuningRecord.device_id, TuningRecord.mean_s, tier)
            .where(
                tuple_(TuningRecord.workload_id, TuningRecord.device_id).in_(chunk),
                TuningRecord.mean_s.is_not(None),
                TuningRecord.trust != "disputed",
            )
            .order_by(TuningRecord.workload_id, TuningRecord.device_id)
        )
        best: dict[tuple[int, int], dict[str, Any]] = {}
        for rid, wid, did, mean_s, t in conn.execute(eligible):
            cur = best.setdefault((wid, did), dict(workload_id=wid, device_id=did, record_id=rid, mean_s=mean_s,
                                                  n_records=0, tier=t))  # fmt: skip
            cur["n_records"] += 1
            if (t, mean_s, rid) < (cur["tier"], cur["mean_s"], cur["record_id"]):
                cur.update(record_id=rid, mean_s=mean_s, tier=t)
        if best:
            conn.execute(insert(conn, BestRecord), [best[k] for k in sorted(best)])


def upsert_model(
    conn: Connection,
    name: str,
    sha256: str,
    input_shapes: dict[str, list[int]],
    tasks: dict[int, tuple[str, int]],
    plain: dict[int, tuple[str, int]] | None = None,
) -> int:
    """Record a model at fixed input shapes and its tasks (workload id -> (task name, weight)); returns its id.
    ``plain``: its kernels as plain TVM extracts them (``PlainTask``), the same way; None leaves those as they are.

    Seeing the same file at the same shapes again replaces its task list, which extraction determines.
    """
    shapes = fitted(canonical_json(input_shapes), Model.input_shapes_json, "the model's input shapes")
    name = fitted(name, Model.name, "the model name")
    stmt = insert(conn, Model).on_conflict_do_nothing(index_elements=["sha256", "input_shapes_json"])
    conn.execute(stmt, dict(name=name, sha256=sha256, input_shapes_json=shapes))
    model_id = conn.execute(select(Model.id).where(Model.sha256 == sha256, Model.input_shapes_json == shapes)).scalar()
    _replace_tasks(conn, ModelTask, model_id, tasks)
    if plain is not None:
        _replace_tasks(conn, PlainTask, model_id, plain)
    return model_id


def _replace_tasks(conn: Connection, table, model_id: int, tasks: dict[int, tuple[str, int]]) -> None:
    """The model's rows of ``table`` (ModelTask or PlainTask) replaced by ``tasks``."""
    conn.execute(table.__table__.delete().where(table.model_id == model_id))
    rows = [
        dict(model_id=model_id, workload_id=w, task_name=fitted(n, table.task_name, "a task name", cut=True), weight=wt)
        for w, (n, wt) in sorted(tasks.items())
    ]
    if rows:
        conn.execute(insert(conn, table), rows)
