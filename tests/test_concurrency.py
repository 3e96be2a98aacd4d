"""Several processes writing at once: nothing lost, nothing duplicated, best records exact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import func, select

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
    with store.read() as s:
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
