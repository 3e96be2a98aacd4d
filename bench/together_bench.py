"""Tuning together (issue #37): `registry tune` processes on one PostgreSQL registry divide the work.

    .venv/bin/python bench/together_bench.py [--models bert-l2-h128 distilbert-l2-h128] [--trials 160] [--runs 3]
        [--pg postgresql://postgres@127.0.0.1:5432/test] [--out bench/results/together.json]

Two corpus models that share tasks (make corpus), one command, ``registry tune A.onnx B.onnx --trials T``, run in
fresh PostgreSQL databases:

1. ``alone``: one process.
2. ``together``: the same command in ``--runs`` processes at once, as ``--runs`` machines would run it (here they
   share this machine's cores: each measures with 1 thread, one kernel at a time). Checked: no task has records of
   two processes (each process writes its own ``--team``), trials measured in all = T, and every lease released.
3. ``killed``: ``--runs`` processes at once with ``--lease 30s``; one is killed with SIGKILL once it has recorded a
   batch. When the others end, the same command runs once more: it must take the dead run's tasks over (their leases
   expire) and leave T records, none twice.
4. ``plateau``: on the ``together`` registry, the command with a large budget and ``--plateau W`` until every task
   has plateaued, then once more: it must measure nothing and only compile and report.

Then the models compiled from the ``alone`` and ``together`` registries are timed in one process, in turn (TVM's
``time_evaluator``, medians over rounds): the same total trials, one process or several, should give the same
latency within noise. Writes the result file with the machine, the commit and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402

REGISTRY = str(Path(sys.executable).with_name("registry"))


def fresh_database(admin: str) -> str:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    url = make_url(admin).set(drivername="postgresql+psycopg")
    name = f"registry_together_{uuid.uuid4().hex[:8]}"
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    u = make_url(url)
    engine = create_engine(u.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{u.database}" WITH (FORCE)'))
    engine.dispose()


def model_args(models: list[str]) -> list[str]:
    args = []
    listing = ROOT / "bench" / "work" / "together-models.txt"
    listing.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for name in models:
        m = BY_NAME[name]
        lines.append(" ".join([str(materialize(m)), *m.shape_args]))
    listing.write_text("\n".join(lines) + "\n")
    args += ["--models", str(listing)]
    return args


def start(url: str, models: list[str], team: str, *extra: str, cpu: int | None = None) -> subprocess.Popen:
    """``registry tune`` of the models in a process of its own (on one core, ``cpu``, if given)."""
    cmd = [REGISTRY, "--db", url, "tune", *model_args(models), "--team", team, "--dop", "1", "--json", *extra]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    env = {**os.environ, "TVM_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finished(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"registry tune failed ({proc.returncode}): {err.strip().splitlines()[-1:]}")
    return json.loads(out[out.index("{") :])


def facts(url: str) -> dict:
    """What the registry holds: records, distinct traces, tasks with records of two teams, leases still held."""
    from sqlalchemy import func, select

    from registry.store.sql.models import TaskEffort, TuningRecord
    from registry.store.sql.store import Store

    store = Store(url)
    try:
        with store.read() as s:
            n = s.execute(select(func.count()).select_from(TuningRecord)).scalar()
            distinct = s.execute(
                select(func.count()).select_from(
                    select(TuningRecord.workload_id, TuningRecord.device_id, TuningRecord.trace_hash)
                    .distinct()
                    .subquery()
                )
            ).scalar()
            teams = s.execute(
                select(
                    TuningRecord.workload_id,
                    TuningRecord.team,
                    func.min(TuningRecord.created_at),
                    func.max(TuningRecord.created_at),
                ).group_by(TuningRecord.workload_id, TuningRecord.team)
            ).all()
            efforts = list(s.execute(select(TaskEffort)).scalars())
    finally:
        store.close()
    by_task: dict[int, list] = {}
    for wid, _team, first, last in teams:
        by_task.setdefault(wid, []).append((first, last))

    def overlapping(spans: list) -> bool:
        """Whether two runs' records of one task interleave in time: both tuned it at once."""
        spans = sorted(spans)
        return any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))

    return {
        "records": n,
        "distinct_records": distinct,
        "tasks": len(by_task),
        "tasks_tuned_by_two_runs": sum(1 for t in by_task.values() if len(t) > 1),
        "tasks_tuned_by_two_runs_at_once": sum(1 for t in by_task.values() if overlapping(t)),
        "leases_held": sum(1 for e in efforts if e.holder is not None),
        "plateaued": sum(1 for e in efforts if e.plateau),
        "effort_trials": sum(e.trials for e in efforts),
    }


def summary(reports: list[dict]) -> dict:
    first = reports[0]["reports"] if "reports" in reports[0] else [reports[0]]
    tuning = first[0]["tuning"]
    return {
        "measured": sum((r["reports"][0] if "reports" in r else r)["tuning"]["trials"]["measured"] for r in reports),
        "waited_s": [(r["reports"][0] if "reports" in r else r)["tuning"]["waited_s"] for r in reports],
        "command_s": [(r["reports"][0] if "reports" in r else r)["timings"]["total_s"] for r in reports],
        "final_ms": {m["model"]: m["final_ms"] for m in first},
        "stop": tuning["stop"],
    }


def alone(url: str, models: list[str], trials: int, pin: bool) -> dict:
    t0 = time.perf_counter()
    report = finished(start(url, models, "alone", "--trials", str(trials), cpu=0 if pin else None))
    return {"wall_s": time.perf_counter() - t0, **summary([report]), **facts(url)}


def together(url: str, models: list[str], trials: int, runs: int, pin: bool) -> dict:
    t0 = time.perf_counter()
    cores = os.cpu_count() or 1
    procs = [
        start(url, models, f"run{i}", "--trials", str(trials), cpu=i % cores if pin else None) for i in range(runs)
    ]
    reports = [finished(p) for p in procs]
    return {"wall_s": time.perf_counter() - t0, **summary(reports), **facts(url)}


def killed(url: str, models: list[str], trials: int, runs: int) -> dict:
    from registry.store.sql.store import Store

    t0 = time.perf_counter()
    procs = [start(url, models, f"run{i}", "--trials", str(trials), "--lease", "30s") for i in range(runs)]
    victim = procs[0]
    store = Store(url)
    while True:  # until the victim has recorded a batch of effort (its team's records are in the registry)
        with store.read() as s:
            from sqlalchemy import func, select

            from registry.store.sql.models import TuningRecord

            mine = s.execute(select(func.count()).select_from(TuningRecord).where(TuningRecord.team == "run0")).scalar()
        if mine or victim.poll() is not None:
            break
        time.sleep(0.5)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    killed_at = time.perf_counter() - t0
    store.close()
    with_leases = facts(url)
    reports = [finished(p) for p in procs[1:]]
    after_others = facts(url)
    resumed = finished(start(url, models, "resumer", "--trials", str(trials), "--lease", "30s"))
    return {
        "wall_s": time.perf_counter() - t0,
        "killed_at_s": killed_at,
        "victim_records": mine,
        "when_killed": with_leases,
        "after_the_others": after_others,
        "others": summary(reports),
        "resumer": summary([resumed]),
        **facts(url),
    }


def plateau(url: str, models: list[str], window: int, budget: str) -> dict:
    t0 = time.perf_counter()
    flags = ["--plateau", str(window), "--min-gain", "0", "--min-share", "0", "--trials", "1000000"]
    first = finished(start(url, models, "plateau", *flags, "--budget", budget))
    first_s = time.perf_counter() - t0
    reached = facts(url)
    t1 = time.perf_counter()
    again = finished(start(url, models, "again", "--plateau", str(window), "--trials", "1000000"))
    return {
        "window": window,
        "first": {"wall_s": first_s, **summary([first]), **reached},
        "again": {"wall_s": time.perf_counter() - t1, **summary([again])},
    }


def same_clock(models: list[str], dbs: dict[str, str], rounds: int) -> dict:
    """Each model compiled from each registry and timed in turn, in one process."""
    from bench.tuning.run import end_to_end
    from registry.records.database import RegistryDatabase
    from registry.store.sql.store import Store
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    target = host_target()
    out = {}
    stores = {k: Store(u) for k, u in dbs.items()}
    for name in models:
        m = BY_NAME[name]
        loaded = load_onnx(materialize(m), m.shapes, name=name)
        databases = {k: RegistryDatabase(target, s, num_threads=1) for k, s in stores.items()}
        out[name] = end_to_end(loaded, target, databases, rounds)
    for s in stores.values():
        s.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs=2, default=["bert-l2-h128", "distilbert-l2-h128"])
    ap.add_argument("--trials", type=int, default=160)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=int, default=16, help="--plateau of the plateau scenario")
    ap.add_argument("--plateau-budget", default="12m")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pg", default=os.environ.get("REGISTRY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/together.json")
    ap.add_argument("--keep", action="store_true", help="keep the databases (their URLs are in the result)")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="each process on one core of its own (taskset), the one-process run too: measurements do not interfere, "
        "as on separate machines (with --runs at most the cores)",
    )
    ap.add_argument("--scenarios", nargs="+", default=["alone", "together", "killed", "plateau"])
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = "1"
    result: dict = {"models": args.models, "trials": args.trials, "runs": args.runs, "pin": args.pin}
    dbs = {k: fresh_database(args.pg) for k in ("alone", "together", "killed") if k in args.scenarios}
    result["databases"] = dbs if args.keep else None
    try:
        if "alone" in args.scenarios:
            print("alone ...", flush=True)
            result["alone"] = alone(dbs["alone"], args.models, args.trials, args.pin)
            print(json.dumps(result["alone"]), flush=True)
        if "together" in args.scenarios:
            print(f"together ({args.runs} processes) ...", flush=True)
            result["together"] = together(dbs["together"], args.models, args.trials, args.runs, args.pin)
            print(json.dumps(result["together"]), flush=True)
        if "killed" in args.scenarios:
            print("killed ...", flush=True)
            result["killed"] = killed(dbs["killed"], args.models, args.trials, args.runs)
            print(json.dumps(result["killed"]), flush=True)
        if "alone" in dbs and "together" in dbs:
            print("same clock ...", flush=True)
            result["e2e_ms"] = same_clock(args.models, {k: dbs[k] for k in ("alone", "together")}, args.rounds)
            print(json.dumps(result["e2e_ms"]), flush=True)
        if "plateau" in args.scenarios and "together" in dbs:
            print("plateau ...", flush=True)
            result["plateau"] = plateau(dbs["together"], args.models, args.window, args.plateau_budget)
            print(json.dumps(result["plateau"]), flush=True)
    finally:
        if not args.keep:
            for url in dbs.values():
                drop_database(url)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(stamped(result), indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
