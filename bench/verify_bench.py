"""`registry verify` throughput on this CPU, and whether it catches a planted record (latency divided by 10).

    nice -n 19 .venv/bin/python bench/verify_bench.py --logs /tmp/verify-logs          # tunes the log once, reuses it

The log is a real one: a tiny matmul+add tuned by plain MetaSchedule (``--trials`` records, TVM's own JSONDatabase),
with its fastest record's latency divided by 10. Each run imports it into a fresh SQLite registry (not timed) and
times one ``verify`` call at the default tolerance, as `registry verify` makes it: starting the measurement workers
(TVM's import in each) is paid by every run; the rate after they started (from the first batch on) is reported
beside it. Writes one JSON object (``--out``): every run's
records/s, their median, and whether each run disputed the planted record.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from registry import hostinfo  # noqa: E402
from tests.tvm_env import plant_fast_claim, tiny_model, tune_with_plain_tvm  # noqa: E402


def tuned_logs(folder: Path, trials: int) -> Path:
    """Plain MetaSchedule's JSONDatabase of the tiny model, tuned on the first run and reused after."""
    if not (folder / "database_tuning_record.json").exists():
        from registry.tvm_side.target import host_target

        tune_with_plain_tvm(folder, tiny_model(), host_target(), trials=trials)
    return folder


def one_run(logs: Path, claimed_s: float) -> dict:
    from registry.store.store import Store
    from registry.tvm_side.log_import import import_logs
    from registry.tvm_side.verify import verify

    first_batch: list[float] = []  # when the first batch began: the workers had started

    def progress(done: int, _total: int, _what: str) -> None:
        if done == 0 and not first_batch:
            first_batch.append(time.perf_counter())

    with tempfile.TemporaryDirectory(prefix="verify-bench-") as tmp:
        store = Store(f"sqlite:///{tmp}/registry.db")
        import_logs(store, logs)
        start = time.perf_counter()
        result = verify(store, "host", progress=progress)
        end = time.perf_counter()
        store.close()
    plant = next(r for r in result.records if abs(r.claimed_us - claimed_s * 1e6) < 1e-6)
    return {
        "records": len(result.records),
        "seconds": round(result.seconds, 2),
        "records_per_s": round(result.records_per_s, 2),
        "worker_start_s": round(first_batch[0] - start, 2),
        "records_per_s_after_start": round(len(result.records) / (end - first_batch[0]), 2),
        "verified": result.count("verified"),
        "disputed": result.count("disputed"),
        "planted_ratio": round(plant.ratio, 2) if plant.ratio is not None else None,
        "planted_caught": plant.verdict == "disputed",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, required=True, help="the tuned log folder: written if missing")
    parser.add_argument("--trials", type=int, default=96, help="records in the log (when it is tuned)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "verify.json")
    args = parser.parse_args()
    from registry.tvm_side.verify import TOLERANCE

    source = tuned_logs(args.logs, args.trials)
    planted = Path(tempfile.mkdtemp(prefix="verify-planted-")) / "logs"
    claimed_s = plant_fast_claim(source, planted)
    runs = []
    for i in range(args.runs):
        runs.append(one_run(planted, claimed_s))
        print(f"run {i + 1}: {json.dumps(runs[-1])}", file=sys.stderr)
    report = {
        "cpu": hostinfo.cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "tvm": hostinfo.tvm_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "tolerance": TOLERANCE,
        "runs": runs,
        "median_records_per_s": statistics.median(r["records_per_s"] for r in runs),
        "median_records_per_s_after_start": statistics.median(r["records_per_s_after_start"] for r in runs),
        "planted_caught_every_run": all(r["planted_caught"] for r in runs),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
