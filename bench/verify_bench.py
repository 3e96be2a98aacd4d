"""`registry verify` throughput on this CPU, and whether it catches a planted record (latency divided by 10).

    nice -n 19 .venv/bin/python bench/verify_bench.py --logs /tmp/verify-logs          # tunes the log once, reuses it

The log is a real one: a tiny matmul+add tuned by plain MetaSchedule (``--trials`` records, TVM's own JSONDatabase),
with its fastest record's latency divided by 10. Each run imports it into a fresh SQLite registry (not timed) and
times `registry verify --json` at the default tolerance as a user runs it, in a fresh process: the rate end to end
is records over the command's wall time (the interpreter's start, TVM's import and the measurement workers' start
included); the rate the command itself reports (its verify call alone) is beside it. Writes one JSON object
(``--out``): every run's figures, their medians, and whether each run disputed the planted record.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REGISTRY = Path(sys.executable).parent / "registry"
sys.path.insert(0, str(ROOT))

from bench.machine_speed import python_reference_s, stamped  # noqa: E402
from registry import hostinfo  # noqa: E402
from tests.tvm_env import plant_fast_claim, tiny_model, tune_with_plain_tvm  # noqa: E402


def tuned_logs(folder: Path, trials: int) -> Path:
    """Plain MetaSchedule's JSONDatabase of the tiny model, tuned on the first run and reused after."""
    if not (folder / "database_tuning_record.json").exists():
        from registry.tvm_side.target import host_target

        tune_with_plain_tvm(folder, tiny_model(), host_target(), trials=trials)
    return folder


def one_run(logs: Path, claimed_s: float) -> dict:
    """One `registry verify --json` as a user runs it, in a fresh process: its wall time includes the interpreter's
    start, TVM's import and the workers' start. The command's own figure (``seconds``) is the verify call alone."""
    from registry.share.log_import import import_logs
    from registry.store.sql.store import Store

    with tempfile.TemporaryDirectory(prefix="verify-bench-") as tmp:
        store = Store(f"sqlite:///{tmp}/registry.db")
        import_logs(store, logs)
        store.close()
        start = time.perf_counter()
        done = subprocess.run(
            [str(REGISTRY), "--db", f"sqlite:///{tmp}/registry.db", "verify", "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - start
    out = json.loads(done.stdout)
    plant = next(r for r in out["rows"] if abs(r["claimed_us"] - claimed_s * 1e6) < 1e-6)
    n = len(out["rows"])
    return {
        "records": n,
        "command_s": round(wall, 2),
        "records_per_s": round(n / wall, 2),
        "verify_s": round(out["seconds"], 2),
        "records_per_s_in_verify": round(out["records_per_s"], 2),
        "verified": out["verified"],
        "disputed": out["disputed"],
        "planted_ratio": round(plant["ratio"], 2) if plant["ratio"] is not None else None,
        "planted_caught": plant["verdict"] == "disputed",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, required=True, help="the tuned log folder: written if missing")
    parser.add_argument("--trials", type=int, default=96, help="records in the log (when it is tuned)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "verify.json")
    args = parser.parse_args()
    from registry.share.verify import TOLERANCE

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
        "python_reference_s": python_reference_s(),  # bench/machine_speed.py: compares this VM with another's
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "tolerance": TOLERANCE,
        "runs": runs,
        "median_records_per_s": statistics.median(r["records_per_s"] for r in runs),
        "median_records_per_s_in_verify": statistics.median(r["records_per_s_in_verify"] for r in runs),
        "planted_caught_every_run": all(r["planted_caught"] for r in runs),
    }
    args.out.write_text(json.dumps(stamped(report), indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
