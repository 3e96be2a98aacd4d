"""Lookup and device selection in plain SQL over DB-API: the one implementation behind ``Store.lookup`` and the CLI.

``registry lookup`` is the command people run most, so it avoids importing SQLAlchemy (about 0.2 s of start-up)
when the database is SQLite or PostgreSQL at the current schema; ``connect`` says when it can.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from registry import hostinfo
from registry.errors import BadInputError, DatabaseError, DeviceNotFoundError, UnknownDeviceError
from registry.store.query import host_device
from registry.store.rows import shape_text
from registry.store.sql import sqlite_file
from registry.store.sql.revision import HEAD, VERSION_TABLE
from registry.store.validation import effort_problem
from registry.store.values import DeviceRow, LookupFilter, LookupRow


class Sql:
    """A DB-API connection with one parameter style: SQL is written with ``:name`` placeholders."""

    def __init__(self, conn, paramstyle: str) -> None:
        self.conn, self.pyformat = conn, paramstyle == "pyformat"

    @classmethod
    def under(cls, conn) -> Sql:
        """The DB-API connection under a SQLAlchemy ``Connection`` (``Store.read``), in its driver's style."""
        return cls(conn.connection.dbapi_connection, "pyformat" if conn.dialect.name == "postgresql" else "named")

    def all(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
        """Rows of one statement. Raises DatabaseError (one line for the user) on any driver error."""
        if self.pyformat:
            sql = re.sub(r"(?<!:):(\w+)", r"%(\1)s", sql)
        cur = self.conn.cursor()
        try:
            cur.execute(sql, params or {})
            return cur.fetchall()
        except Exception as e:  # sqlite3.Error or psycopg.Error: the driver is not imported here on purpose
            if type(e).__module__.split(".")[0] not in ("sqlite3", "psycopg"):
                raise
            raise DatabaseError(f"database error: {str(e).strip().splitlines()[0]}") from e
        finally:
            cur.close()


def connect(url: str) -> Sql | None:
    """A direct connection to an existing SQLite file or a PostgreSQL database at schema HEAD, else None (then the
    caller goes through ``Store``, which migrates a fresh database or explains what is wrong)."""
    sql = None
    try:
        if url.startswith("sqlite:///") and "?" not in url:
            path = os.path.expanduser(url[len("sqlite:///") :])
            if path in ("", ":memory:") or not os.path.exists(path) or sqlite_file.problem(Path(path)):
                return None
            import sqlite3

            uri = sqlite_file.read_only_uri(Path(path))
            sql = Sql(sqlite3.connect(uri or path, timeout=30, uri=uri is not None), "named")
        elif re.match(r"postgres(ql)?(\+psycopg)?://", url):
            import psycopg

            conninfo = re.sub(r"^postgres(ql)?(\+psycopg)?://", "postgresql://", url)
            sql = Sql(psycopg.connect(conninfo, connect_timeout=5), "pyformat")
        else:
            return None
        if sql.all(f"SELECT version_num FROM {VERSION_TABLE}") == [(HEAD,)]:
            return sql
    except Exception:  # noqa: BLE001 - any failure here is reported properly by the Store path
        pass
    if sql is not None:  # not used: closed now, not when collected (an open transaction holds PostgreSQL locks)
        sql.conn.close()
    return None


# -- devices --------------------------------------------------------------------------------------------------


_DEVICE_COLS = "SELECT id, name, host_model, tvm_version, target_json, key, num_threads FROM device"


def all_devices(sql: Sql) -> list[DeviceRow]:
    return [DeviceRow(*r) for r in sql.all(f"{_DEVICE_COLS} ORDER BY id")]


MAX_ROW_ID = 2**63 - 1  # a BIGINT's largest: a larger number is no row's id, and would overflow the database's


def as_row_id(text: str) -> int | None:
    """``text`` as a row id where it is one: ASCII digits (``str.isdigit`` takes "²" too) of at most a BIGINT."""
    if text.isascii() and text.isdigit() and int(text) <= MAX_ROW_ID:
        return int(text)
    return None


def resolve_devices(sql: Sql, selector: str) -> list[DeviceRow]:
    """Devices matching ``selector``: ``host`` (this machine's CPU and TVM release), a device id, or a device name.

    Raises UnknownDeviceError, naming the known devices, when nothing matches.
    """
    sel = selector.strip()
    if sel == "host":  # registry.store.query.is_host, in SQL
        where, params = "host_model = :h AND tvm_version = :v", {"h": hostinfo.cpu_model(), "v": hostinfo.tvm_version()}
    elif (row_id := as_row_id(sel)) is not None:
        where, params = "id = :id", {"id": row_id}
    else:
        where, params = "name = :name", {"name": sel}
    found = [DeviceRow(*r) for r in sql.all(f"{_DEVICE_COLS} WHERE {where} ORDER BY id", params)]
    if not found:
        known = ", ".join(f"{d.id}:{d.name}" for d in all_devices(sql))
        where_ = "on this machine " if sel == "host" else ""
        raise DeviceNotFoundError(
            f"no device {sel!r} {where_}in the registry (known: {known or 'none yet'}); see `registry devices`"
        )
    return found


def resolve_one_device(sql: Sql, selector: str) -> DeviceRow:
    found = resolve_devices(sql, selector)
    if len(found) > 1 and selector.strip() == "host":
        found = host_device(found, _measured_here(sql, [d.id for d in found]))
    if len(found) > 1:
        choices = ", ".join(f"{d.id} ({d.name}, {d.host_model}, TVM {d.tvm_version})" for d in found)
        raise UnknownDeviceError(f"device {selector!r} is ambiguous; give its id, one of: {choices}")
    return found[0]


def _measured_here(sql: Sql, device_ids: list[int]) -> set[int]:
    """Of ``device_ids``, those whose best record of some workload was measured by this registry, or verified here
    (``best_record.tier`` 0): the devices this machine has run on."""
    params: dict[str, Any] = {}
    rows = sql.all(f"SELECT DISTINCT device_id FROM best_record WHERE tier = 0 AND device_id IN "
                   f"({_in_list('d', device_ids, params)})", params)  # fmt: skip
    return {r[0] for r in rows}


# -- lookup ---------------------------------------------------------------------------------------------------


def _in_list(prefix: str, values: list[Any], params: dict[str, Any]) -> str:
    names = []
    for i, v in enumerate(values):
        params[f"{prefix}{i}"] = v
        names.append(f":{prefix}{i}")
    return ", ".join(names)


def lookup(sql: Sql, f: LookupFilter) -> list[LookupRow]:
    """The best ``top_k`` records of each (workload, device) that matches every given filter.

    Driven by ``best_record``, so its cost grows with the rows returned, not with the records stored.
    """
    where, params = [], {"limit": f.limit, "offset": f.offset}
    if f.op:
        where.append("w.op_kind = :op")
        params["op"] = f.op.lower()
    if f.workload:
        where.append("w.shash = :shash")
        params["shash"] = f.workload
    if f.trust == "verified":
        where.append("b.tier = 0")  # best_record prefers tier 0: a pair with any such record has one as its best
    elif f.trust != "imported":
        raise BadInputError(f"unknown trust {f.trust!r}; expected imported or verified")
    if f.device_ids is not None:
        where.append(f"b.device_id IN ({_in_list('d', f.device_ids, params) or 'NULL'})")
    if f.shape is not None or f.dtype:
        arg = ["1 = 1"]
        if f.shape is not None:
            arg.append("shape = :shape")
            params["shape"] = shape_text(f.shape)
        if f.dtype:
            arg.append("dtype = :dtype")
            params["dtype"] = f.dtype
        where.append(f"b.workload_id IN (SELECT workload_id FROM workload_arg WHERE {' AND '.join(arg)})")
    if f.model:
        # A model's workloads: those recorded as its tasks, and those whose records name it as their provenance.
        where.append(
            "b.workload_id IN (SELECT mt.workload_id FROM model_task mt JOIN model m ON m.id = mt.model_id"
            " WHERE m.name = :model UNION SELECT workload_id FROM tuning_record WHERE model = :model)"
        )
        params["model"] = f.model
    pairs = sql.all(
        "SELECT b.workload_id, b.device_id, b.n_records, b.record_id"
        " FROM best_record b JOIN workload w ON w.id = b.workload_id"
        f" WHERE {' AND '.join(where) or '1 = 1'}"
        " ORDER BY w.op_kind, b.workload_id, b.device_id LIMIT :limit OFFSET :offset",
        params,
    )
    if f.top_k <= 1 or not pairs:
        ranked = {rid: (n, 1) for _w, _d, n, rid in pairs}
    else:
        counts = {(w, d): n for w, d, n, _ in pairs}
        p: dict[str, Any] = {"k": f.top_k}
        trusted = "'measured', 'verified'" + (", 'imported'" if f.trust == "imported" else "")
        values = ", ".join(f"(:w{i}, :d{i})" for i in range(len(counts)))
        for i, (w, d) in enumerate(counts):
            p[f"w{i}"], p[f"d{i}"] = w, d
        top = sql.all(
            "SELECT workload_id, device_id, id, rn FROM (SELECT workload_id, device_id, id,"
            " ROW_NUMBER() OVER (PARTITION BY workload_id, device_id"
            " ORDER BY CASE WHEN trust IN ('measured', 'verified') THEN 0 ELSE 1 END, mean_s, id) AS rn"
            f" FROM tuning_record WHERE mean_s IS NOT NULL AND trust IN ({trusted})"
            f" AND (workload_id, device_id) IN (VALUES {values})) t"
            " WHERE rn <= :k",
            p,
        )
        ranked = {rid: (counts[(w, d)], rn) for w, d, rid, rn in top}
    return _rows(sql, ranked)


def _rows(sql: Sql, ranked: dict[int, tuple[int, int]]) -> list[LookupRow]:
    found = []
    ids = list(ranked)
    for start in range(0, len(ids), 5000):  # bound parameters per statement stay far below SQLite's 32766
        params: dict[str, Any] = {}
        found += sql.all(
            "SELECT r.id, r.mean_s, r.source, r.team, r.model, r.created_at, r.trust, r.origin, r.verified_mean_s,"
            " w.shash, w.op_kind, w.task_name, w.args_json, w.flops, d.id, d.name, d.num_threads,"
            " e.trials, e.seconds, e.plateau"
            " FROM tuning_record r JOIN workload w ON w.id = r.workload_id JOIN device d ON d.id = r.device_id"
            " LEFT JOIN task_effort e ON e.workload_id = r.workload_id AND e.device_id = r.device_id"
            f" WHERE r.id IN ({_in_list('r', ids[start : start + 5000], params)})",
            params,
        )
    rows = []
    for (rid, mean_s, source, team, model, created, trust, origin, verified_s,
         shash, op, task, args, flops, did, dname, threads, trials, seconds, plateau) in found:  # fmt: skip
        sent = bool(plateau) if plateau in (0, 1) else plateau  # SQLite keeps a boolean as 0 or 1
        if trials is not None and effort_problem(trials, seconds, [], sent):
            trials = seconds = plateau = None  # a crafted effort row reads as none, as registry.store.sql.efforts does
        n, rank = ranked[rid]
        rows.append(
            LookupRow(
                workload=shash,
                op=op,
                task=task,
                args=json.loads(args),
                flops=flops,
                device_id=did,
                device=dname,
                threads=threads,
                rank=rank,
                record_id=rid,
                latency_us=mean_s * 1e6,
                gflops=flops / mean_s / 1e9 if mean_s else 0.0,
                records=n,
                source=source,
                team=team,
                model=model,
                created_at=created.isoformat(timespec="seconds")
                if hasattr(created, "isoformat")
                else str(created).replace(" ", "T"),
                trust=trust,
                origin=origin,
                verified_latency_us=verified_s * 1e6 if verified_s is not None else None,
                effort_trials=trials,
                effort_s=seconds,
                plateau=None if plateau is None else bool(plateau),
            )
        )
    rows.sort(key=lambda r: (r.op, r.task, r.workload, r.device_id, r.rank))
    return rows
