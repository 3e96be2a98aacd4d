"""What checking a candidate's outputs costs (``registry/tvm_side/output_check.py``), compiled with LLVM's
optimizations (-O3, TVM's default) and without (opt-level 0, what the check uses): one registry's tuned records.

    .venv/bin/python bench/output_check_bench.py [--db bench/work/cnn/starter/nudenet-yolov8n-320.db] [--tasks 12]

The registry's records of this machine are exported (``registry export``); for each of the ``--tasks`` workloads
whose best record is slowest, the check runs as the tuning engine runs it for a candidate: the workload compiled
unscheduled and run once (the reference), then the best record's schedule compiled and run. Each opt-level in turn,
``--rounds`` times; medians of the sums. Every check must pass at both levels. Writes
bench/results/output_check.json (machine, commit, date).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine_speed import stamped  # noqa: E402

REGISTRY = str(Path(sys.executable).with_name("registry"))


def best_records(db: Path, tasks: int) -> list:
    """The best record of each of the ``tasks`` workloads whose best is slowest, as MetaSchedule records."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([REGISTRY, "-q", "--db", str(db), "export", "-o", tmp, "--device", "host"], check=True)
        database = ms.database.JSONDatabase(f"{tmp}/database_workload.json", f"{tmp}/database_tuning_record.json")
        best: dict[str, object] = {}
        for r in database.get_all_tuning_records():
            if r.run_secs:
                key = tvm.ir.save_json(r.workload.mod)
                if key not in best or float(r.run_secs[0]) < float(best[key].run_secs[0]):
                    best[key] = r
    return sorted(best.values(), key=lambda r: -float(r.run_secs[0]))[:tasks]


def check_seconds(records: list, target) -> tuple[float, float]:
    """Seconds spent checking every record: on the workloads (compile and run, once each), on the schedules."""
    from tvm.s_tir import Schedule

    from registry.tvm_side.output_check import OutputCheck

    on_workloads = on_schedules = 0.0
    for r in records:
        sch = Schedule(r.workload.mod)
        r.trace.apply_to_schedule(sch, remove_postproc=False)
        check = OutputCheck(r.workload.mod, target)
        check.target = target  # the level asked for, not the check's own
        t0 = time.perf_counter()
        check._want = check._run(r.workload.mod)
        t1 = time.perf_counter()
        problem = check.problem(sch.mod)
        on_workloads, on_schedules = on_workloads + t1 - t0, on_schedules + time.perf_counter() - t1
        if problem is not None:
            raise SystemExit(f"a stored best record fails its check: {problem}")
    return on_workloads, on_schedules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, default=ROOT / "bench/work/cnn/starter/nudenet-yolov8n-320.db")
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/output_check.json")
    args = parser.parse_args()

    from registry.tvm_side.output_check import unoptimized
    from registry.tvm_side.target import host_target

    records = best_records(args.db, args.tasks)
    levels = {"O3 (TVM's default)": host_target(), "opt-level 0 (the check's)": unoptimized(host_target())}
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in levels}
    for _ in range(args.rounds):
        for name, target in levels.items():
            samples[name].append(check_seconds(records, target))
    rows = [
        {
            "level": name,
            "workloads_s": statistics.median(s[0] for s in runs),
            "schedules_s": statistics.median(s[1] for s in runs),
            "samples": runs,
        }
        for name, runs in samples.items()
    ]
    for row in rows:
        times = f"workloads {row['workloads_s']:.2f} s, schedules {row['schedules_s']:.2f} s"
        print(f"{row['level']:28} {len(records)} tasks: {times}")
    result = {"db": str(args.db), "tasks": len(records), "rounds": args.rounds, "rows": rows}
    args.out.write_text(json.dumps(stamped(result), indent=2) + "\n")


if __name__ == "__main__":
    main()
