"""Siblings seed a new device (issue #37, item 4): the trials `registry tune` needs on a second device to reach plain
MetaSchedule's latency after ``--trials`` trials there, with a sibling device's records in the registry against an
empty registry.

    .venv/bin/python bench/tuning/siblings.py [--models bert-l2-h128 resnet-basic-w32] [--trials 512]
        [--pair mcpu|threads] [--work bench/work/siblings] [--out bench/results/siblings-mcpu.json]

Pairs of devices, both measured on this machine, that differ in code generation:
- ``mcpu``: the sibling is an AVX2 target (``mcpu=haswell``), the new device this machine's own (AVX-512 on a Zen 4);
- ``threads``: the sibling is this CPU at 1 runtime thread, the new device the same CPU at 2.

For each model (corpus names, ``make corpus``):
1. **The bar**: plain ``tune_relax`` on the new device, ``--trials`` trials (``bench/tuning/run.py``'s), and its
   estimate after them (each task's best record x its weight, summed).
2. **The sibling**: ``registry tune --trials N`` on the sibling device into an empty registry, then
   ``registry predictor train`` there.
3. **The new device**, ``registry tune`` as a user runs it, (a) into an empty registry, (b) into a copy of the
   sibling's: resumed in steps (``--trials`` 64, 128, 256, 512) until its estimate reaches the bar or the trials
   reach plain's (then: not reached within them).
4. **Trials to the bar**: from the new device's records in the order they were measured, the first trial count at
   which the estimate is at or under the bar. The two registry runs share a clock (the registry's measurer); the bar
   comes from plain's (MetaSchedule's runner): compare the two registry runs with each other.

Writes the result with the machine, the commit and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.corpus.run import shape_args  # noqa: E402
from bench.machine_speed import provenance, stamped  # noqa: E402
from bench.sqlite_copy import copy_sqlite  # noqa: E402

REGISTRY = str(Path(sys.executable).with_name("registry"))


def devices(pair: str) -> dict[str, tuple[str, int]]:
    """(--target, threads) of the sibling and of the new device."""
    if pair == "mcpu":
        from registry.tvm_side.target import host_target

        haswell = {"kind": "llvm", "mcpu": "haswell", "mtriple": str(host_target().attrs["mtriple"])}
        return {"sibling": (json.dumps(haswell), 1), "new": ("host", 1)}
    return {"sibling": ("host", 1), "new": ("host", 2)}


def tune(name: str, db: Path, target: str, threads: int, trials: int) -> dict:
    model = BY_NAME[name]
    cmd = [REGISTRY, "--db", f"sqlite:///{db}", "tune", str(materialize(model)), *shape_args(model)]
    cmd += ["--target", target, "--threads", str(threads), "--trials", str(trials), "--json"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: registry tune failed: {done.stderr.strip().splitlines()[-1:]}")
    report = json.loads(done.stdout[done.stdout.index("{") :])
    return {"wall_s": time.perf_counter() - start, "report": report}


def train_predictor(db: Path, device: int) -> dict:
    cmd = [REGISTRY, "--db", f"sqlite:///{db}", "predictor", "train", "--device", str(device), "--json"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"predictor train failed: {done.stderr.strip().splitlines()[-1:]}")
    return {"seconds": time.perf_counter() - start, "output": json.loads(done.stdout[done.stdout.index("{") :])}


def trial_curve(db: Path, name: str, target, device_id: int, defaults: dict[str, float]) -> list[tuple[int, float]]:
    """(trials measured on the device, estimate µs) after every record that improved a task, in record order."""
    from sqlalchemy import select

    from bench.tuning.run import _task_weights, load
    from registry.store.sql.models import TuningRecord
    from registry.store.sql.store import Store

    store = Store(f"sqlite:///{db}")
    tasks = _task_weights(store, load(name), target)  # workload id -> (task name, weight, mod)
    best = {wid: defaults[n] for wid, (n, _, _) in tasks.items()}
    weight = {wid: w for wid, (_, w, _) in tasks.items()}
    with store.read() as s:
        rows = s.execute(
            select(TuningRecord.workload_id, TuningRecord.mean_s)
            .where(TuningRecord.device_id == device_id, TuningRecord.workload_id.in_(list(tasks)))
            .order_by(TuningRecord.id)
        ).all()
    store.close()
    points = [(0, sum(weight[w] * best[w] for w in tasks))]
    for i, (wid, mean_s) in enumerate(rows, 1):
        if mean_s is not None and mean_s * 1e6 < best[wid]:
            best[wid] = mean_s * 1e6
            points.append((i, sum(weight[w] * best[w] for w in tasks)))
    points.append((len(rows), points[-1][1]))
    return points


def trials_to(points: list[tuple[int, float]], bar: float) -> int | None:
    return next((n for n, est in points if est <= bar * 1.0001), None)


def device_of(db: Path, target: str, threads: int) -> int:
    from registry.store.sql.store import Store

    store = Store(f"sqlite:///{db}")
    try:
        for d in store.all_devices():
            spec = json.loads(d.target_json)
            mcpu_ok = (spec.get("mcpu") == "haswell") == ("haswell" in target)
            if mcpu_ok and d.num_threads == threads:
                return d.id
    finally:
        store.close()
    raise SystemExit(f"no device {target} x {threads} in {db}")


def new_device_run(name: str, db: Path, new: tuple[str, int], bar: float, cap: int, defaults, target) -> dict:
    steps, trials = [], 64
    while True:
        run = tune(name, db, new[0], new[1], trials)
        tuning = run["report"]["tuning"]
        steps.append({"trials": trials, "wall_s": run["wall_s"], "final_ms": run["report"]["final_ms"],
                      "stop": tuning["stop"], "summary": tuning["summary"]})  # fmt: skip
        points = trial_curve(db, name, target, device_of(db, *new), defaults)
        reached = trials_to(points, bar)
        print(f"  {db.name}: {trials} trials, estimate {points[-1][1]:.1f} µs (bar {bar:.1f}): {reached}", flush=True)
        if reached is not None or trials >= cap:
            return {"trials_to_bar": reached, "curve": points, "steps": steps}
        trials *= 2


def model(name: str, pair: str, trials: int, work: Path) -> dict:
    from bench.tuning.run import _task_weights, curve, load, plain
    from registry.measure.jobs import module_job
    from registry.measure.measurer import Measurer
    from registry.store.sql.store import Store
    from registry.tvm_side.defaults import default_schedule
    from registry.tvm_side.target import target_from_option

    pair_devices = devices(pair)
    new_target = target_from_option(pair_devices["new"][0])
    base = plain(name, work, 0, new_target, pair_devices["new"][1], total=trials)
    plain_store = Store(f"sqlite:///{base['db']}")
    loaded = load(name)
    tasks = _task_weights(plain_store, loaded, new_target)
    with Measurer(new_target, pair_devices["new"][1]) as measurer:
        timings = measurer.kernels(
            [module_job(default_schedule(m, new_target), new_target) for _, _, m in tasks.values()]
        )
    defaults = {n: m.median_us or float("inf") for (n, _, _), m in zip(tasks.values(), timings, strict=True)}
    by_wid = {wid: defaults[n] for wid, (n, _, _) in tasks.items()}
    plain_curve = curve(plain_store, loaded, new_target, plain_store.all_devices()[0].id, base["started"], by_wid)
    bar = plain_curve[-1][1]
    plain_store.close()
    print(f"{name}: plain {trials} trials in {base['seconds']:.0f} s, estimate {bar:.1f} µs", flush=True)

    sibling_db = work / f"sibling-{pair}-{name}.db"
    sibling_meta = sibling_db.with_suffix(".json")
    if sibling_meta.exists():
        sibling = json.loads(sibling_meta.read_text())
    else:
        sibling_db.unlink(missing_ok=True)
        sib = pair_devices["sibling"]
        sibling = {"tune": tune(name, sibling_db, sib[0], sib[1], trials)}
        sibling["tune"]["report"].pop("history", None)
        sibling["predictor"] = train_predictor(sibling_db, device_of(sibling_db, *sib))
        sibling_meta.write_text(json.dumps(sibling))
    print(f"{name}: sibling tuned in {sibling['tune']['wall_s']:.0f} s", flush=True)

    runs = {}
    for kind in ("empty", "siblings"):
        db = work / f"new-{pair}-{kind}-{name}.db"
        db.unlink(missing_ok=True)
        if kind == "siblings":
            copy_sqlite(sibling_db, db)
        runs[kind] = new_device_run(name, db, pair_devices["new"], bar, trials, defaults, new_target)
    e, s = runs["empty"]["trials_to_bar"], runs["siblings"]["trials_to_bar"]
    return {
        "model": name,
        "pair": pair,
        "devices": pair_devices,
        "plain": {"trials": trials, "seconds": base["seconds"], "estimate_us": bar, "curve": plain_curve},
        "sibling": {
            "wall_s": sibling["tune"]["wall_s"],
            "predictor_s": sibling["predictor"]["seconds"],
            "predictor": sibling["predictor"]["output"],
        },  # fmt: skip
        "new_device": runs,
        "trials_to_bar": {"empty": e, "siblings": s},
        "fewer": None if e is None or s is None else 1 - s / e,
    }


def same_clock(row: dict, work: Path) -> dict:
    """The bar on the registry's clock. Plain's records were timed by MetaSchedule's runner, the registry's by its
    workers: each build's applied schedules (plain's, and the two registries' at their last step) are timed alone by
    one measurer, interleaved; the bar is then plain's estimate times the ratio of the two clocks on plain's own
    schedules, and the trials to it are read again from the curves."""
    from bench.tuning.converge import remeasured
    from registry.measure.measurer import Measurer
    from registry.tvm_side.target import target_from_option

    name, pair = row["model"], row["pair"]
    target = target_from_option(row["devices"]["new"][0])
    dbs = {
        "plain": work / f"plain-{name}.db",
        "empty": work / f"new-{pair}-empty-{name}.db",
        "siblings": work / f"new-{pair}-siblings-{name}.db",
    }
    with Measurer(target, row["devices"]["new"][1]) as measurer:
        tasks = remeasured(name, dbs, target, measurer)
    estimate = {k: sum(t["us"] * t["calls"] for t in v) for k, v in tasks.items()}
    clock = estimate["plain"] / row["plain"]["estimate_us"]
    bar = row["plain"]["estimate_us"] * clock
    trials = {k: trials_to([tuple(p) for p in row["new_device"][k]["curve"]], bar) for k in ("empty", "siblings")}
    return {"estimate_us": estimate, "clock_ratio": clock, "bar_us": bar, "trials_to_bar": trials}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["bert-l2-h128", "resnet-basic-w32"])
    ap.add_argument("--trials", type=int, default=512)
    ap.add_argument("--pair", choices=("mcpu", "threads"), default="mcpu")
    ap.add_argument("--work", type=Path, default=ROOT / "bench/work/siblings")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--same-clock", action="store_true", help="only time the builds of a finished run on one clock")
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(devices(args.pair)["new"][1])  # before TVM's runtime starts: plain's threads
    args.work.mkdir(parents=True, exist_ok=True)
    out = args.out or ROOT / f"bench/results/siblings-{args.pair}.json"
    if args.same_clock:
        done = json.loads(out.read_text())
        for row in done["results"]:
            row["same_clock"] = same_clock(row, args.work)
            print(json.dumps({"model": row["model"], **row["same_clock"]}), flush=True)
        done["same_clock_provenance"] = provenance()  # the run's own provenance stays
        out.write_text(json.dumps(done, indent=2))
        return
    results = []
    for name in args.models:
        results.append(model(name, args.pair, args.trials, args.work))
        print(json.dumps({k: results[-1][k] for k in ("model", "trials_to_bar", "fewer")}), flush=True)
        out.write_text(json.dumps(stamped({"results": results}), indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
