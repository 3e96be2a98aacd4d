"""Effort and leases (table ``task_effort``): what tuning runs spent on each (workload, device), and which run tunes
it now.

A lease is taken by one conditional UPDATE (the row is free, expired, or already ours), so of two runs racing for a
task exactly one sees its row change; PostgreSQL's row lock and SQLite's single writer make that atomic. Times are
the writers' clocks in UTC: a lease lasts minutes, so clocks kept by NTP agree well enough.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from sqlalchemy import Connection, and_, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from registry.store.rows import utc
from registry.store.sql.models import TaskEffort
from registry.store.values import Effort


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def efforts(conn: Connection, workload_ids: Sequence[int], device_id: int) -> dict[int, Effort]:
    cols = (
        TaskEffort.workload_id,
        TaskEffort.trials,
        TaskEffort.seconds,
        TaskEffort.curve_json,
        TaskEffort.plateau,
        TaskEffort.holder,
        TaskEffort.lease_until,
    )
    out = {}
    for start in range(0, len(workload_ids), 500):  # bounded IN lists
        chunk = list(workload_ids[start : start + 500])
        stmt = select(*cols).where(TaskEffort.device_id == device_id, TaskEffort.workload_id.in_(chunk))
        for wid, trials, seconds, curve, plateau, holder, until in conn.execute(stmt):
            points = _curve(curve)
            out[wid] = Effort(trials, seconds, points, bool(plateau), holder, None if until is None else utc(until))
    return out


def _curve(text: str) -> tuple[tuple[int, float], ...]:
    """A stored curve; one that does not parse (a crafted row) reads as none: it only informs the plateau rule."""
    try:
        return tuple((int(n), float(us)) for n, us in json.loads(text))
    except (ValueError, TypeError):
        return ()


def take(conn: Connection, workload_id: int, device_id: int, holder: str, lease_s: float) -> str | None:
    """Take or renew the lease of a task for ``holder``: None when it holds it now, else the run that does."""
    insert = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert
    conn.execute(insert(TaskEffort).values(workload_id=workload_id, device_id=device_id).on_conflict_do_nothing())
    t = now()
    key = and_(TaskEffort.workload_id == workload_id, TaskEffort.device_id == device_id)
    free = or_(TaskEffort.holder.is_(None), TaskEffort.holder == holder, TaskEffort.lease_until < t)
    done = conn.execute(
        update(TaskEffort).where(key, free).values(holder=holder, lease_until=t + dt.timedelta(seconds=lease_s))
    )
    if done.rowcount:
        return None
    return conn.execute(select(TaskEffort.holder).where(key)).scalar_one()


def renew(conn: Connection, holder: str, lease_s: float) -> int:
    """Extend every lease ``holder`` holds; how many it holds."""
    until = now() + dt.timedelta(seconds=lease_s)
    return conn.execute(update(TaskEffort).where(TaskEffort.holder == holder).values(lease_until=until)).rowcount


def save(
    conn: Connection,
    workload_id: int,
    device_id: int,
    holder: str,
    added: tuple[int, float],
    curve: Sequence[tuple[int, float]],
    plateau: bool,
    lease_s: float | None,
) -> bool:
    """Add ``added`` (trials, seconds) to a task's effort and set its curve and plateau, if ``holder`` still holds its
    lease; renew the lease for ``lease_s`` more seconds, or release it (None). False when another run took it."""
    t = now()
    done = conn.execute(
        update(TaskEffort)
        .where(TaskEffort.workload_id == workload_id, TaskEffort.device_id == device_id, TaskEffort.holder == holder)
        .values(
            trials=TaskEffort.trials + added[0],
            seconds=TaskEffort.seconds + added[1],
            curve_json=json.dumps([[n, round(us, 4)] for n, us in curve]),
            plateau=plateau,
            holder=holder if lease_s is not None else None,
            lease_until=t + dt.timedelta(seconds=lease_s) if lease_s is not None else None,
            updated_at=t,
        )
    )
    return bool(done.rowcount)


def release(conn: Connection, holder: str) -> int:
    """Release every lease ``holder`` holds (a run's end); how many."""
    stmt = update(TaskEffort).where(TaskEffort.holder == holder).values(holder=None, lease_until=None)
    return conn.execute(stmt).rowcount


def merge(conn: Connection, sent: Sequence[tuple], local: dict[tuple[str, str], int]) -> None:
    """Another registry's effort (``IngestExtras.efforts``; ``local``: its workloads' ids here): kept for a
    (workload, device) this registry recorded fewer trials of, as the sender recorded it. Leases do not travel."""
    from registry.store.sql.models import Device

    keys = {key for _, key, *_ in sent}
    devices = dict(conn.execute(select(Device.key, Device.id).where(Device.key.in_(keys))).all())
    insert = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert
    for workload, key, trials, seconds, curve, plateau in sent:
        wid, did = local.get(workload), devices.get(key)
        if wid is None or did is None:
            continue  # a workload or device whose records were all refused
        conn.execute(insert(TaskEffort).values(workload_id=wid, device_id=did).on_conflict_do_nothing())
        conn.execute(
            update(TaskEffort)
            .where(TaskEffort.workload_id == wid, TaskEffort.device_id == did, TaskEffort.trials < trials)
            .values(
                trials=trials,
                seconds=seconds,
                curve_json=json.dumps([[n, us] for n, us in curve]),
                plateau=plateau,
                updated_at=now(),
            )
        )
