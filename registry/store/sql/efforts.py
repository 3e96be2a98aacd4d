"""Effort and leases (table ``task_effort``): what tuning runs spent on each (workload, device), and which run tunes
it now.

A lease is taken by one conditional UPDATE (the row is free, expired, or already ours), so of two runs racing for a
task exactly one sees its row change; PostgreSQL's row lock and SQLite's single writer make that atomic. Times are
the writers' clocks in UTC: a lease lasts minutes, so clocks kept by NTP agree well enough.

An effort is a claim, checked like a record (``validation.effort_problem``) wherever it is read: a row that fails
is ignored with a warning, and the next run that takes the task starts its effort afresh. An effort another registry
sent (a bundle, a sync, a push) is kept with the holder ``IMPORTED``: it is the sender's claim, not a measurement
here, so ``registry tune`` reads it as no effort (it never skips a task), and the first run that takes the task
replaces it with its own. A lease longer than ``MAX_LEASE_S`` (crafted, or left by a version without that bound),
or one whose time does not read, counts as expired (with ``CLOCK_SLACK`` for the writers' clocks): no run waits
on it.
"""

from __future__ import annotations

import datetime as dt
import json
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select, type_coerce, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.types import NullType

from registry.errors import BadInputError, RegistryWarning
from registry.store.rows import utc
from registry.store.sql.models import Model, ModelTask, TaskEffort
from registry.store.validation import CLOCK_SLACK_S, MAX_CURVE, MAX_LEASE_S, effort_problem
from registry.store.values import IMPORTED_EFFORT, Effort, EffortUpdate

IMPORTED = IMPORTED_EFFORT
CLOCK_SLACK = dt.timedelta(seconds=CLOCK_SLACK_S)
MAX_CURVE_TEXT = MAX_CURVE * 64  # characters of a stored curve: a point is "[2147483647, 123456.7891]" at most


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# Every column as the driver returns it: a crafted value (text in an INTEGER or DATETIME column of SQLite) must reach
# the checks below, not fail in SQLAlchemy's conversion.
_ROW = tuple(
    type_coerce(c, NullType())
    for c in (
        TaskEffort.workload_id,
        TaskEffort.trials,
        TaskEffort.seconds,
        TaskEffort.curve_json,
        TaskEffort.plateau,
        TaskEffort.holder,
        TaskEffort.lease_until,
    )
)


def efforts(conn: Connection, workload_ids: Sequence[int], device_id: int) -> dict[int, Effort]:
    """The effort of each of these workloads that has a readable one; one warning names the rows that do not."""
    out, problems = {}, []
    t = now()
    for start in range(0, len(workload_ids), 500):  # bounded IN lists
        chunk = list(workload_ids[start : start + 500])
        stmt = select(*_ROW).where(TaskEffort.device_id == device_id, TaskEffort.workload_id.in_(chunk))
        for row in conn.execute(stmt):
            effort, problem = _effort(row[1:], t)
            if problem is not None:
                problems.append(f"workload {row[0]} on device {device_id}: {problem}")
            if effort is not None:
                out[row[0]] = effort
    if problems:
        warnings.warn(
            f"{len(problems)} task effort row(s) not used as stored (first: {problems[0]})", RegistryWarning, 2
        )
    return out


def _effort(row: Sequence[Any], t: dt.datetime) -> tuple[Effort | None, str | None]:
    """A stored row as an Effort and what is wrong with it: (None, why) for an effort that fails its checks (ignored);
    (an Effort without its lease, why) for a lease that does not read or runs past ``MAX_LEASE_S``."""
    trials, seconds, curve_text, plateau, holder, until = row
    curve = _curve(curve_text)
    if isinstance(plateau, int) and plateau in (0, 1):  # SQLite keeps a boolean as 0 or 1
        plateau = bool(plateau)
    problem = "its curve is not JSON" if curve is None else effort_problem(trials, seconds, curve, plateau)
    if problem is not None:
        return None, f"{problem}: ignored; the next run that tunes the task starts its effort afresh"
    points = tuple((n, float(us)) for n, us in curve)
    if holder is None or holder == IMPORTED:
        return Effort(trials, float(seconds), points, plateau, holder), None
    lease, problem = _lease(str(holder), until, t)
    return Effort(trials, float(seconds), points, plateau, None if lease is None else str(holder), lease), problem


def _curve(text: Any) -> list | None:
    """A stored curve's JSON, None when it is not JSON (or nested or long past what a run writes)."""
    if not isinstance(text, str) or len(text) > MAX_CURVE_TEXT:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _lease(holder: str, until: Any, t: dt.datetime) -> tuple[dt.datetime | None, str | None]:
    """A held row's lease end, or (None, why) when it counts as expired though a run's name is on it."""
    if isinstance(until, str):  # SQLite keeps times as text
        try:
            until = dt.datetime.fromisoformat(until)
        except ValueError:
            pass
    if not isinstance(until, dt.datetime):
        return None, f"the lease of {holder!r} has no time that reads ({str(until)[:40]!r}): counted as expired"
    if utc(until) > t + dt.timedelta(seconds=MAX_LEASE_S) + CLOCK_SLACK:
        return None, (
            f"the lease of {holder!r} runs until {utc(until).isoformat(timespec='seconds')}, longer than a lease may "
            f"({MAX_LEASE_S / 3600:g} h): counted as expired"
        )
    return utc(until), None


def _free(conn: Connection, holder: str, t: dt.datetime):
    """A row ``holder`` may take: no run holds it (released, or imported), it is ``holder``'s, or its lease expired,
    runs past ``MAX_LEASE_S``, or has no time that reads (a crafted row); the same rule as ``_lease``."""
    until = TaskEffort.lease_until
    free = [
        TaskEffort.holder.is_(None),
        TaskEffort.holder == holder,
        TaskEffort.holder == IMPORTED,
        until.is_(None),
        until < t,
        until > t + dt.timedelta(seconds=MAX_LEASE_S) + CLOCK_SLACK,
    ]
    if conn.dialect.name == "sqlite":  # a time as text: SQLite's datetime() reads what SQLAlchemy writes, else NULL
        free.append(func.datetime(until).is_(None))
    return or_(*free)


def take(conn: Connection, workload_id: int, device_id: int, holder: str, lease_s: float) -> str | None:
    """Take or renew the lease of a task for ``holder``: None when it holds it now, else the run that does. A row
    that is another registry's claim, or that fails its checks, is started afresh by the run that takes it."""
    insert = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert
    conn.execute(insert(TaskEffort).values(workload_id=workload_id, device_id=device_id).on_conflict_do_nothing())
    t = now()
    key = and_(TaskEffort.workload_id == workload_id, TaskEffort.device_id == device_id)
    row = conn.execute(select(*_ROW[1:]).where(key).with_for_update()).one()  # locked until the UPDATE below
    effort, _ = _effort(row, t)
    values: dict[str, Any] = dict(holder=holder, lease_until=t + dt.timedelta(seconds=lease_s))
    if effort is None or effort.holder == IMPORTED:
        values.update(trials=0, seconds=0.0, curve_json="[]", plateau=False)
    done = conn.execute(update(TaskEffort).where(key, _free(conn, holder, t)).values(**values))
    if done.rowcount:
        return None
    return str(row[4])


def renew(conn: Connection, holder: str, lease_s: float) -> int:
    """Extend every lease ``holder`` holds; how many it holds."""
    until = now() + dt.timedelta(seconds=lease_s)
    return conn.execute(update(TaskEffort).where(TaskEffort.holder == holder).values(lease_until=until)).rowcount


def save(conn: Connection, u: EffortUpdate) -> bool:
    """Add ``u.added`` (trials, seconds) to a task's effort and set its curve and plateau, if ``u.holder`` still holds
    its lease; renew the lease for ``u.lease_s`` more seconds, or release it (None). False when another run took it."""
    t = now()
    held = (TaskEffort.workload_id == u.workload_id, TaskEffort.device_id == u.device_id, TaskEffort.holder == u.holder)
    done = conn.execute(
        update(TaskEffort)
        .where(*held)
        .values(
            trials=TaskEffort.trials + u.added[0],
            seconds=TaskEffort.seconds + u.added[1],
            curve_json=json.dumps([[n, round(us, 4)] for n, us in u.curve]),
            plateau=u.plateau,
            holder=u.holder if u.lease_s is not None else None,
            lease_until=t + dt.timedelta(seconds=u.lease_s) if u.lease_s is not None else None,
            updated_at=t,
        )
    )
    return bool(done.rowcount)


def release(conn: Connection, holder: str) -> int:
    """Release every lease ``holder`` holds (a run's end); how many."""
    stmt = update(TaskEffort).where(TaskEffort.holder == holder).values(holder=None, lease_until=None)
    return conn.execute(stmt).rowcount


def release_leases(conn: Connection, model: str | None, may_run: Callable[[str], bool]) -> tuple[int, dict[str, int]]:
    """Release the leases no running tune can hold: expired, past ``MAX_LEASE_S``, unreadable, or of a run that
    ``may_run`` says has ended; of ``model``'s tasks only, if given. Returns (how many released, the leases left by
    holder)."""
    t = now()
    where = [TaskEffort.holder.is_not(None), TaskEffort.holder != IMPORTED]
    if model is not None:
        models = select(Model.id).where(Model.name == model)
        if conn.execute(models.limit(1)).first() is None:
            raise BadInputError(f"no model named {model!r} in the registry")
        where.append(TaskEffort.workload_id.in_(select(ModelTask.workload_id).where(ModelTask.model_id.in_(models))))
    cols = (TaskEffort.workload_id, TaskEffort.device_id, *_ROW[5:])
    released, left = 0, {}
    for wid, did, holder, until in conn.execute(select(*cols).where(*where)).all():
        lease, _ = _lease(str(holder), until, t)
        if lease is not None and lease > t and may_run(str(holder)):
            left[str(holder)] = left.get(str(holder), 0) + 1
            continue
        released += conn.execute(
            update(TaskEffort)
            .where(TaskEffort.workload_id == wid, TaskEffort.device_id == did, TaskEffort.holder == holder)
            .values(holder=None, lease_until=None)
        ).rowcount
    return released, left


def merge(conn: Connection, sent: Sequence[tuple], local: dict[tuple[str, str], int]) -> None:
    """Another registry's effort (``IngestExtras.efforts``; ``local``: its workloads' ids here), kept as its claim
    (holder ``IMPORTED``) where this registry has no effort of its own on that (workload, device), or an imported one
    of fewer trials. Leases do not travel."""
    from registry.store.sql.models import Device

    keys = {key for _, key, *_ in sent}
    devices = dict(conn.execute(select(Device.key, Device.id).where(Device.key.in_(keys))).all())
    insert = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert
    for workload, key, trials, seconds, curve, plateau in sent:
        wid, did = local.get(workload), devices.get(key)
        if wid is None or did is None:
            continue  # a workload or device whose records were all refused
        conn.execute(
            insert(TaskEffort).values(workload_id=wid, device_id=did, holder=IMPORTED).on_conflict_do_nothing()
        )
        conn.execute(
            update(TaskEffort)
            .where(
                TaskEffort.workload_id == wid,
                TaskEffort.device_id == did,
                TaskEffort.holder == IMPORTED,
                TaskEffort.trials < trials,
            )
            .values(
                trials=trials,
                seconds=seconds,
                curve_json=json.dumps([[n, us] for n, us in curve]),
                plateau=plateau,
                updated_at=now(),
            )
        )
