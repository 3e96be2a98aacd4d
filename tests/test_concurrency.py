"""Several processes writing at once: nothing lost, nothing duplicated, best records exact."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.store.sql import schema
from registry.store.sql.models import BestRecord, TuningRecord, Workload
from registry.store.sql.store import Store

WORKERS, WORKLOADS, PER = 4, 6, 5
ROOT = Path(__file__).resolve().parent.parent


def test_concurrent_writers_on_a_fresh_database(db_url):
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.writer", db_url, str(w), str(WORKLOADS), str(PER)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors

    store = Store(db_url)
    with store.engine.connect() as conn:
        assert schema.current_revision(conn) == schema.HEAD
    expected = WORKLOADS * PER * (1 + WORKERS)  # the shared records once, plus each worker's own
    with Session(store.engine) as s:
        assert s.execute(select(func.count()).select_from(Workload)).scalar() == WORKLOADS
        assert s.execute(select(func.count()).select_from(TuningRecord)).scalar() == expected
        distinct = select(TuningRecord.workload_id, TuningRecord.device_id, TuningRecord.trace_hash).distinct()
        assert s.execute(select(func.count()).select_from(distinct.subquery())).scalar() == expected
        truth = dict(
            s.execute(
                select(TuningRecord.workload_id, func.min(TuningRecord.mean_s)).group_by(TuningRecord.workload_id)
            ).all()
        )
        counts = dict(
            s.execute(select(TuningRecord.workload_id, func.count()).group_by(TuningRecord.workload_id)).all()
        )
        for best in s.execute(select(BestRecord)).scalars():
            assert best.mean_s == truth[best.workload_id]
            assert best.n_records == counts[best.workload_id]


def test_opening_a_fresh_file_while_another_process_holds_its_lock(tmp_path):
    # Another program holds a write lock on a fresh (rollback-journal) file for a moment. Turning the file to WAL
    # mode fails at once there, without SQLite's busy handler; opening the registry must wait for the lock instead.
    path = tmp_path / "registry.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.5, holder.execute, ["COMMIT"])
    release.start()
    started = time.monotonic()
    store = Store(f"sqlite:///{path}")
    waited = time.monotonic() - started
    release.join()
    with store.engine.connect() as conn:
        assert schema.current_revision(conn) == schema.HEAD
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    assert waited >= 0.4  # it waited for the holder rather than slipping past its lock
    store.close()
    holder.close()
