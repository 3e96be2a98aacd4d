"""Convergence: plain ``tune_relax`` against ``registry tune --budget`` given a third of plain's time, on an empty
registry, and onnxruntime, on the same machine.

    .venv/bin/python bench/tuning/converge.py [--models gpu-vit-l2-h128 ...] [--trials-per-task 36] [--share 0.333]
    .venv/bin/python bench/tuning/converge.py --trials 2000 --work bench/work/plateau --out bench/results/plateau.json
    .venv/bin/python bench/tuning/converge.py --models gpu-bert-l2-h128 resnet-basic-w32 gpu-vit-l2-h128 --trials 512 \
        --share 0.2 --start predictor --work bench/work/tune512 --out bench/results/tune512-predictor.json

1. **Plain.** ``tune_relax`` as in ``bench/tuning/run.py`` (MetaSchedule's defaults, the PersistentBuilder), kept
   under ``--work`` and reused; ``--trials-per-task`` x tasks trials. Its wall time is T.
2. **Registry.** ``registry tune MODEL --budget (share x T) --trials 1000000`` into an empty registry, as a user runs
   it (a fresh process; the command's wall time, compile and report included, is kept beside the budget); with
   ``--start predictor``, into one that holds only the starter bundle's predictor (issue #53's "from an empty
   registry with the shipped predictor").
3. **Curves.** The estimated model latency (each task's best so far x its weight, summed) against wall time for both,
   from the records' timestamps; both models run with fast math (the CLI's default on a CPU).
4. **End to end.** Untuned, plain's and the registry's builds and onnxruntime, timed in turn, 3 rounds, medians.
5. **Same clock.** Each task's schedule as each build applies it, timed alone by the registry's workers, plain's and
   the registry's in turn: the estimate of both builds from one clock (the curves' come from two: MetaSchedule's
   LocalRunner timed plain's records).

Writes bench/results/converge.json (with the machine, the commit and the date) and converge.png, and prints the table
of docs/BENCHMARKS.md ("Convergence against plain MetaSchedule's plateau").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.corpus.run import registry, shape_args  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402
from bench.tuning.run import _now, _task_weights, curve, load, plain, time_to  # noqa: E402


def shipped_predictor_only(db: Path, work: Path) -> None:
    """Make ``db`` a registry that holds the starter bundle's predictor and none of its records: what "an empty
    registry with the shipped predictor" means (``registry pull`` into a scratch registry, then the predictor copied
    through the storage protocol; a ranking predictor ranks for this machine's device as a sibling's)."""
    from registry.store.decode import device_spec
    from registry.store.sql.store import Store
    from registry.store.values import PredictorIn

    pulled = work / "starter-pulled.db"
    if not pulled.exists():
        report, error = registry("pull", "--json", db=pulled)
        if report is None:
            raise SystemExit(f"registry pull: {error}")
    source, into = Store(f"sqlite:///{pulled}"), Store(f"sqlite:///{db}")
    devices = {d.id: d for d in source.all_devices()}
    for info in source.list_predictors():
        row = devices[info.device_id]
        spec = device_spec(row)
        stored = source.latest_predictor(info.device_id, info.kind)
        into.save_predictor(
            PredictorIn(
                into.add_device(spec),
                stored.kind,
                stored.blob,
                info.metrics,
                info.n_workloads,
                info.n_records,
                info.tvm_version,
            )
        )
    if not into.list_predictors():
        raise SystemExit("the starter bundle holds no predictor")


def registry_tune(name: str, work: Path, budget_s: float, start: str = "empty") -> dict:
    """``registry tune --budget`` as a user runs it, into an empty registry (``start="empty"``) or one that holds
    only the starter bundle's predictor (``"predictor"``)."""
    db = work / (f"registry-budget-{name}.db" if start == "empty" else f"registry-budget-{name}-{start}.db")
    meta_file = db.with_suffix(".json")
    if meta_file.exists():
        return json.loads(meta_file.read_text())
    db.unlink(missing_ok=True)
    if start == "predictor":
        shipped_predictor_only(db, work)
    model = BY_NAME[name]
    print(f"registry tune {name} --budget {budget_s:.0f}s", flush=True)
    started, start = _now(), time.perf_counter()
    args = ["tune", str(materialize(model)), *shape_args(model), "--budget", f"{budget_s:.1f}", "--trials", "1000000"]
    report, error = registry(*args, "--json", db=db)
    wall = time.perf_counter() - start
    if report is None:
        raise SystemExit(f"{name}: {error}")
    meta = {
        "budget_s": budget_s,
        "wall_s": wall,
        "started": started.isoformat(),
        "db": str(db),
        "start": start,
        "report": report,
    }
    meta_file.write_text(json.dumps(meta))
    return meta


def compare(
    name: str, work: Path, tpt: int, total: int, share: float, target, threads: int, start: str = "empty"
) -> dict:
    from tvm.s_tir import meta_schedule as ms

    from bench.corpus.ort_reference import timed_with_onnxruntime
    from registry.measure.jobs import module_job
    from registry.measure.measurer import Measurer
    from registry.records.database import RegistryDatabase
    from registry.store.sql.store import Store
    from registry.tvm_side.compat import TVM_ERRORS, error_line
    from registry.tvm_side.compile import compile_model
    from registry.tvm_side.defaults import default_schedule

    try:
        base = plain(name, work, tpt, target, threads, total=total)
    except TVM_ERRORS as e:  # plain MetaSchedule stops at the first task its rules cannot schedule
        return {"model": name, "plain_error": error_line(e)[:300]}
    ours = registry_tune(name, work, share * base["seconds"], start)
    plain_store, our_store = Store(f"sqlite:///{base['db']}"), Store(f"sqlite:///{ours['db']}")
    loaded = load(name)
    tasks = _task_weights(plain_store, loaded, target)
    with Measurer(target) as measurer:
        timings = measurer.kernels([module_job(default_schedule(mod, target), target) for _, _, mod in tasks.values()])
        defaults = {wid: m.median_us or float("inf") for wid, m in zip(tasks, timings, strict=True)}
        by_name = {n: defaults[w] for w, (n, _, _) in tasks.items()}
        plain_curve = curve(plain_store, loaded, target, plain_store.all_devices()[0].id, base["started"], defaults)
        ours_defaults = {w: by_name[n] for w, (n, _, _) in _task_weights(our_store, loaded, target).items()}
        our_curve = curve(our_store, loaded, target, _measured_device(our_store), ours["started"], ours_defaults)
        exes = {
            k: compile_model(db, loaded.mod, target)
            for k, db in (
                ("untuned", ms.database.MemoryDatabase()),
                ("plain", RegistryDatabase(target, plain_store, num_threads=threads)),
                ("registry", RegistryDatabase(target, our_store, num_threads=threads)),
            )
        }
        path, shapes = materialize(BY_NAME[name]), BY_NAME[name].shapes
        samples = timed_with_onnxruntime(measurer, exes, loaded.inputs, path, shapes, rounds=3)
        same_clock = remeasured(name, {"plain": Path(base["db"]), "registry": Path(ours["db"])}, target, measurer)
    plain_final = plain_curve[-1][1]
    return {
        "model": name,
        "start": start,
        "predictor": [ours["report"]["tuning"].get(k) for k in ("predictor_version", "predictor_from")],
        "plain_s": base["seconds"],
        "plain_trials": base["trials"],
        "budget_s": ours["budget_s"],
        "registry_wall_s": ours["wall_s"],
        "registry_trials": sum(t["measurements"] for t in ours["report"]["tasks"]),
        "registry_stop": ours["report"]["tuning"]["stop"],
        "plain_final_est_us": plain_final,
        "registry_final_est_us": our_curve[-1][1],
        "time_to_plain_final_s": {
            "plain": time_to(plain_curve, plain_final),
            "registry": time_to(our_curve, plain_final),
        },
        "e2e_ms": {k: sorted(v)[len(v) // 2] for k, v in samples.items() if v},
        "e2e_spread_ms": {k: [min(v), max(v)] for k, v in samples.items() if v},
        "remeasured_est_us": {k: sum(t["us"] * t["calls"] for t in v) for k, v in same_clock.items()},
        "remeasured_tasks": same_clock,
        "plain_curve": plain_curve,
        "registry_curve": our_curve,
    }


def _measured_device(store) -> int:
    """The device the registry's records were measured on: the one with the most (a registry that started with the
    shipped predictor also holds the predictor's device, with none)."""
    return max(store.all_devices(), key=lambda d: store.count_records(d.id)).id


def remeasured(name: str, dbs: dict[str, Path], target, measurer) -> dict[str, list[dict]]:
    """Per build, each task's applied schedule timed alone by one measurer, the builds' jobs interleaved task by task.
    The curves' estimates come from two clocks (plain's records were timed by MetaSchedule's LocalRunner, the
    registry's by its own workers), and on the BERT they disagreed with the end-to-end order of the two builds."""
    from bench.tuning.gap import applied_schedules

    sides = {k: applied_schedules(name, db, target) for k, db in dbs.items()}
    names = [[t.name for t in side["tasks"]] for side in sides.values()]
    if any(n != names[0] for n in names):
        raise SystemExit(f"{name}: the registries list different tasks: {names}")
    interleaved = [job for jobs in zip(*(s["jobs"] for s in sides.values()), strict=True) for job in jobs]
    timings = measurer.kernels(interleaved)
    out = {}
    for i, (key, side) in enumerate(sides.items()):
        out[key] = [
            {"task": t.name, "calls": t.weight, "us": m.median_s * 1e6, "record": a}
            for t, m, a in zip(side["tasks"], timings[i :: len(sides)], side["applied"], strict=True)
        ]
    return out


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.tuning.run import step_curve

    results = [r for r in results if "plain_error" not in r]
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, r in zip(axes[0], results, strict=True):
        step_curve(ax, r["plain_curve"], r["plain_s"], "plain tune_relax")
        step_curve(ax, r["registry_curve"], r["registry_wall_s"], f"registry tune --budget {r['budget_s']:.0f}s")
        ax.axhline(r["e2e_ms"]["onnxruntime"] * 1e3, color="gray", ls=":", label="onnxruntime (end to end)")
        ax.set(title=r["model"], xlabel="wall time, s", ylabel="estimated model latency, µs", yscale="log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def table(results: list[dict]) -> str:
    lines = [
        "| model | plain: trials, s, est. µs | registry: budget s, command s, trials, est. µs | est. registry / plain "
        "| same clock: est. registry / plain | e2e ms: untuned / plain / registry / onnxruntime "
        "| registry / onnxruntime |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "plain_error" in r:
            lines.append(f"| {r['model']} | plain tune_relax failed: {r['plain_error'][:120]} | | | | |")
            continue
        e, again = r["e2e_ms"], r.get("remeasured_est_us")  # runs before the remeasure have none
        same_clock = f"{again['registry'] / again['plain']:.3f}" if again else "-"
        lines.append(
            f"| {r['model']} | {r['plain_trials']}, {r['plain_s']:.0f}, {r['plain_final_est_us']:.0f} "
            f"| {r['budget_s']:.0f}, {r['registry_wall_s']:.0f}, {r['registry_trials']}, "
            f"{r['registry_final_est_us']:.0f} | {r['registry_final_est_us'] / r['plain_final_est_us']:.3f} "
            f"| {same_clock} "
            f"| {e['untuned']:.2f} / {e['plain']:.3f} / {e['registry']:.3f} / {e['onnxruntime']:.3f} "
            f"| {e['registry'] / e['onnxruntime']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["gpu-vit-l2-h128"])
    parser.add_argument("--trials-per-task", type=int, default=36)
    parser.add_argument("--trials", type=int, default=0, help="plain's trials over all tasks (replaces the above)")
    parser.add_argument("--share", type=float, default=1 / 3, help="registry's budget as a share of plain's time")
    parser.add_argument(
        "--start",
        choices=["empty", "predictor"],
        default="empty",
        help="registry tune into an empty registry, or one holding only the starter bundle's predictor",
    )
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "converge")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "converge.json")
    args = parser.parse_args()

    from registry.tvm_side.target import host_target, runtime_threads

    target, threads = host_target(), runtime_threads()
    args.work.mkdir(parents=True, exist_ok=True)
    results = [
        compare(m, args.work, args.trials_per_task, args.trials, args.share, target, threads, args.start)
        for m in args.models
    ]
    args.out.write_text(json.dumps(stamped({"results": results}), indent=1))
    plot(results, args.out.with_suffix(".png"))
    print(table(results))


if __name__ == "__main__":
    main()
