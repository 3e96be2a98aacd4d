"""Tuning benchmark: ``registry tune`` against plain MetaSchedule ``tune_relax`` on the same models and machine.

    .venv/bin/python bench/tuning/run.py [--models bert-tiny bert-mini] [--trials-per-task 32]
    .venv/bin/python bench/tuning/run.py --target cuda --default-builder --models bert-l2-h128 vit-l2-h192-p8 \
        resnet-basic-w32 --trials-per-task 16      # make bench-gpu: on a machine with an NVIDIA GPU

Models are the zoo's (bert-tiny, bert-mini, ...) or the corpus's (bench/corpus/catalogue.py, made by make corpus).

For every model (the *target*) and one other model of the list (the *registry model*):

1. **Plain.** ``tune_relax`` with MetaSchedule's defaults (evolutionary search, XGBoost cost model starting cold,
   LocalRunner measuring one candidate at a time) except the builder: TVM's LocalBuilder times out every build on
   the machine this was written on (registry/measure/builder.py), so plain gets the PersistentBuilder too, which
   only makes the baseline faster. ``--trials-per-task`` trials per task, in batches of 32. Its records go to a
   registry of their own, with their times; the run is kept under ``--work`` and reused. With ``--default-builder``
   plain also runs with TVM's own LocalBuilder, as a user gets it today (on the H100 it timed most builds out),
   reported beside it.
2. **Registry.** A copy of the *registry model*'s plain registry (what a team would already have), a predictor
   trained on it (``registry predictor train``; its training time is reported apart, it is paid once per device),
   then ``registry tune`` on the target with the same trial cap: donor seeds, predictor ranking, trimming, parallel
   measurement, early stops.
3. **Curves.** At every second, each task's best latency so far (its default schedule before any record) times its
   weight, summed: the model's estimated latency. Time to the same latency: the first time registry's curve is at
   or below plain's final value, against plain's time to reach that value.
4. **End to end.** Both registries compile the model; untuned, plain and registry builds are timed back to back,
   three rounds, medians.

Writes bench/results/tuning.json, tuning.png (the curves) and prints the table of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.machine_speed import stamped  # noqa: E402
from bench.sqlite_copy import copy_sqlite  # noqa: E402
from registry.tvm_side import zoo  # noqa: E402

SHAPE = {"bert": {"seq": 32}, "cnn": {"image": 64}}
PLAIN_BATCH = 32


def load(name: str):
    """The model as `registry tune` takes it, for plain and registry alike: the registry's pipeline
    (``compile.model_passes``, which ``task_module`` and ``compile_model`` run) makes its fast math on a CPU."""
    from bench.corpus.catalogue import BY_NAME, materialize
    from registry.tvm_side.frontend import load_onnx

    if name in BY_NAME:
        return load_onnx(materialize(BY_NAME[name]), BY_NAME[name].shapes, name=name)
    kwargs = SHAPE["bert" if name.startswith("bert") else "cnn"] if name != "mlp" else {}
    return load_onnx(zoo.ZOO[name](**kwargs).SerializeToString(), name=name)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0)


def plain(
    name: str, work: Path, trials_per_task: int, target, threads: int, builder: str = "persistent", total: int = 0
) -> dict:
    """Plain tune_relax into work/plain-<name>.db (kept, and reused by later runs); with ``builder="default"``, TVM's
    own LocalBuilder, into work/plain-default-builder-<name>.db. ``total`` (trials over all tasks, when given)
    replaces ``trials_per_task``: a plateau run is sized by its global trial count, as MetaSchedule's is."""
    from tvm.s_tir import meta_schedule as ms

    from registry.measure.builder import PersistentBuilder
    from registry.pipeline.model_run import extract
    from registry.records.database import RegistryDatabase
    from registry.store.sql.store import Store
    from registry.tvm_side.compat import prepare_tuning
    from registry.tvm_side.compile import task_module

    stem = f"plain-{name}" if builder == "persistent" else f"plain-default-builder-{name}"
    meta_file = work / f"{stem}.json"
    if meta_file.exists():
        return json.loads(meta_file.read_text())
    db_path = work / f"{stem}.db"
    db_path.unlink(missing_ok=True)
    store = Store(f"sqlite:///{db_path}")
    loaded = load(name)
    tasks = extract(store, loaded, target)
    trials = total or trials_per_task * len(tasks)
    print(f"plain tune_relax {name}: {len(tasks)} tasks, {trials} trials", flush=True)
    names = {t.ident[0]: t.name for t in tasks}
    db = RegistryDatabase(target, store, num_threads=threads, model=name, task_names=names)
    prepare_tuning(target.kind.name)
    # the registry's tasks (a CPU convolution's weight layout-free), so that both sides tune the same set
    zero = task_module(loaded.mod, target)
    started = _now()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        ms.relax_integration.tune_relax(
            zero,
            {},
            target,
            tmp,
            max_trials_global=trials,
            num_trials_per_iter=PLAIN_BATCH,
            database=db,
            builder=PersistentBuilder() if builder == "persistent" else "local",
            seed=1,
        )
    meta = {
        "seconds": time.perf_counter() - start,
        "started": started.isoformat(),
        "trials": trials,
        "db": str(db_path),
    }
    meta_file.write_text(json.dumps(meta))
    return meta


def registry_run(name: str, donor: str, work: Path, trials_per_task: int, target, threads: int) -> dict:
    """registry tune on ``name`` over a copy of the plain registry of ``donor``."""
    from registry.pipeline.tune import ModelTuneOptions, tune
    from registry.pipeline.tuning_policy import EngineOptions
    from registry.store.sql.store import Store
    from registry.tvm_side import predictor

    db_path = work / f"registry-{name}-from-{donor}.db"
    copy_sqlite(work / f"plain-{donor}.db", db_path)
    store = Store(f"sqlite:///{db_path}")
    device_id = store.all_devices()[0].id
    t0 = time.perf_counter()
    model, metrics = predictor.train(store, device_id)
    predictor.save(store, device_id, model, metrics)
    train_s = time.perf_counter() - t0
    print(f"registry tune {name} (registry of {donor}; predictor trained in {train_s:.0f} s)", flush=True)
    loaded = load(name)
    n_tasks = len(_task_weights(store, loaded, target))
    options = ModelTuneOptions(engine=EngineOptions(trials=trials_per_task * n_tasks))
    started = _now()
    start = time.perf_counter()
    report = tune(store, loaded, target, threads, options)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "tuning_s": report.timings.finding_s,
        "started": started.isoformat(),
        "predictor_train_s": train_s,
        "predictor_metrics": metrics,
        "report": report.as_json(),
        "db": str(db_path),
    }


def _task_weights(store, loaded, target):
    from registry.pipeline.model_run import extract

    return {t.workload_id: (t.name, t.weight, t.mod) for t in extract(store, loaded, target)}


def curve(store, loaded, target, device_id: int, started: str, defaults: dict[int, float]) -> list[tuple[float, float]]:
    """(seconds since start, estimated model latency µs) at every change; records stored before start count at 0."""
    from sqlalchemy import select

    from registry.store.sql.models import TuningRecord

    weights = {wid: w for wid, (_, w, _) in _task_weights(store, loaded, target).items()}
    t0 = dt.datetime.fromisoformat(started)
    with store.read() as conn:
        rows = conn.execute(
            select(TuningRecord.workload_id, TuningRecord.created_at, TuningRecord.mean_s)
            .where(TuningRecord.device_id == device_id, TuningRecord.workload_id.in_(list(weights)))
            .where(TuningRecord.mean_s.is_not(None))
        ).all()
    best = dict(defaults)
    events = sorted((max(0.0, (c.replace(tzinfo=None) - t0).total_seconds()), w, m * 1e6) for w, c, m in rows)
    points = [(0.0, sum(weights[w] * best[w] for w in weights))]
    for t, wid, us in events:
        if us < best[wid]:
            best[wid] = us
            points.append((t, sum(weights[w] * best[w] for w in weights)))
    return points


def time_to(points: list[tuple[float, float]], latency: float) -> float | None:
    return next((t for t, v in points if v <= latency * 1.0001), None)


def end_to_end(loaded, target, dbs: dict, rounds: int = 3) -> dict[str, float]:
    from registry.measure.jobs import interleaved_model_ms
    from registry.measure.measurer import Measurer
    from registry.tvm_side.compile import compile_model

    exes = {k: compile_model(db, loaded.mod, target) for k, db in dbs.items()}
    with Measurer(target) as measurer:
        return interleaved_model_ms(measurer, exes, loaded.inputs, rounds)


def sibling_transfer(name: str, donor: str, work: Path, target, threads: int, budget: int = 8) -> dict:
    """``registry transfer`` of ``name`` (no fallback tuning) over a copy of ``donor``'s plain registry: the search
    time, kept in the result, and the registry it wrote, which the end-to-end timing compiles with."""
    from registry.pipeline.transfer import ModelTransferOptions, transfer
    from registry.store.sql.store import Store

    db_path = work / f"transfer-{name}-from-{donor}.db"
    copy_sqlite(work / f"plain-{donor}.db", db_path)
    print(f"registry transfer {name} (registry of {donor}, {budget} candidates per task)", flush=True)
    start = time.perf_counter()
    report = transfer(Store(f"sqlite:///{db_path}"), load(name), target, threads,
                      ModelTransferOptions(candidates=budget, tune_trials=0))  # fmt: skip
    return {"donor": donor, "seconds": time.perf_counter() - start, "budget": budget, "db": str(db_path),
            "tasks_transferred": sum(t.source == "transferred" for t in report.tasks)}  # fmt: skip


def compare(name: str, donor: str, work: Path, tpt: int, target, threads: int, default_builder: bool = False) -> dict:
    from tvm.s_tir import meta_schedule as ms

    from registry.measure.jobs import module_job
    from registry.measure.measurer import Measurer
    from registry.records.database import RegistryDatabase
    from registry.store.sql.store import Store
    from registry.tvm_side.defaults import default_schedule

    base = plain(name, work, tpt, target, threads)
    plain(donor, work, tpt, target, threads)
    ours = registry_run(name, donor, work, tpt, target, threads)
    plain_store, our_store = Store(f"sqlite:///{work / f'plain-{name}.db'}"), Store(f"sqlite:///{ours['db']}")
    loaded = load(name)
    tasks = _task_weights(plain_store, loaded, target)
    with Measurer(target) as measurer:
        timings = measurer.kernels([module_job(default_schedule(mod, target), target) for _, _, mod in tasks.values()])
    defaults = {wid: m.median_us or float("inf") for wid, m in zip(tasks, timings, strict=True)}
    plain_dev = plain_store.all_devices()[0].id
    plain_curve = curve(plain_store, loaded, target, plain_dev, base["started"], defaults)
    # Workload ids differ between the two databases: map the defaults through the task names.
    names = {n: defaults[w] for w, (n, _, _) in tasks.items()}
    our_tasks = _task_weights(our_store, loaded, target)
    our_defaults = {w: names[n] for w, (n, _, _) in our_tasks.items()}
    our_curve = curve(our_store, loaded, target, our_store.all_devices()[0].id, ours["started"], our_defaults)
    target_us = plain_curve[-1][1]
    plain_t = time_to(plain_curve, target_us)
    our_t = time_to(our_curve, target_us)
    # The estimate carries a few percent of measurement noise: the times to come within 1, 2 and 5% of plain's
    # final latency say more than the time to match it to the microsecond.
    within = {
        f"{pct}%": (time_to(plain_curve, target_us * (1 + pct / 100)), time_to(our_curve, target_us * (1 + pct / 100)))
        for pct in (1, 2, 5)
    }
    as_users_get_it = None
    if default_builder:  # plain tune_relax with TVM's own LocalBuilder, the same trials
        run = plain(name, work, tpt, target, threads, builder="default")
        default_store = Store(f"sqlite:///{run['db']}")
        default_defaults = {w: names[n] for w, (n, _, _) in _task_weights(default_store, loaded, target).items()}
        points = curve(default_store, loaded, target, default_store.all_devices()[0].id, run["started"],
                       default_defaults)  # fmt: skip
        as_users_get_it = {"seconds": run["seconds"], "final_est_us": points[-1][1], "curve": points,
                           "time_to_target_s": time_to(points, target_us)}  # fmt: skip
    sibling = sibling_transfer(name, donor, work, target, threads)
    e2e = end_to_end(
        loaded,
        target,
        {
            "untuned": ms.database.MemoryDatabase(),
            "plain": RegistryDatabase(target, plain_store, num_threads=threads),
            "registry": RegistryDatabase(target, our_store, num_threads=threads),
            "transfer": RegistryDatabase(target, Store(f"sqlite:///{sibling['db']}"), num_threads=threads),
        },
    )
    # Transfer against full tuning: the share of plain tuning's speed-up over the default ("untuned": DLight on a
    # GPU) that transfer gets, and its search time against plain's.
    sibling["speedup_share"] = (
        (e2e["untuned"] / e2e["transfer"] - 1) / (e2e["untuned"] / e2e["plain"] - 1)
        if (e2e["untuned"] and e2e["plain"] and e2e["transfer"] and e2e["untuned"] > e2e["plain"])
        else None
    )
    sibling["time_share"] = sibling["seconds"] / base["seconds"]
    return {
        "model": name,
        "registry_of": donor,
        "plain_s": base["seconds"],
        "registry_s": ours["seconds"],
        "predictor_train_s": ours["predictor_train_s"],
        "predictor_metrics": ours["predictor_metrics"],
        "plain_final_est_us": target_us,
        "registry_final_est_us": our_curve[-1][1],
        "plain_time_to_target_s": plain_t,
        "registry_time_to_target_s": our_t,
        "time_ratio": (our_t / plain_t) if our_t is not None and plain_t else None,
        "within": within,  # "1%": (plain s, registry s) to come within 1% of plain's final estimate
        "e2e_ms": e2e,
        "plain_curve": plain_curve,
        "registry_curve": our_curve,
        "registry_report": ours["report"],
        "plain_default_builder": as_users_get_it,
        "transfer_from_registry_of": sibling,
    }


def step_curve(ax, points: list, end_s: float, label: str, scale: float = 1.0) -> None:
    """An estimated-latency curve (seconds, µs) as steps, running on flat to the end of its run (``end_s``)."""
    xs = [t for t, _ in points] + [end_s]
    ys = [us * scale for _, us in points] + [points[-1][1] * scale]
    ax.step(xs, ys, where="post", label=label)


def plot(results: list[dict], path: Path) -> None:
    """Top row: whole runs, log scale. Bottom row: the last 20% above plain's final estimate, linear."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 7.5), squeeze=False)
    for col, r in enumerate(results):
        final = r["plain_final_est_us"] / 1000
        for row, ax in enumerate(axes[:, col]):
            for kind, label in (("plain", "plain tune_relax"), ("registry", "registry tune")):
                step_curve(ax, r[f"{kind}_curve"], r[f"{kind}_s"], label, scale=1 / 1000)
            ax.axhline(final, color="grey", linestyle=":", linewidth=1)
            ax.set_xlabel("wall time, s")
            if row == 0:
                ax.set_yscale("log")
                ax.set_ylabel("estimated model latency, ms (log)")
                ax.set_title(f"{r['model']} (registry holds {r['registry_of']})")
                ax.legend()
            else:
                ax.set_ylim(final * 0.97, final * 1.2)
                ax.set_ylabel("the same, ms: within 20% of plain's final")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _transfer_cell(r: dict, e: dict) -> str:
    t = r.get("transfer_from_registry_of")
    if not t or e.get("transfer") is None:
        return "-"
    share = f"{t['speedup_share']:.0%}" if t.get("speedup_share") is not None else "-"
    return f"{e['transfer']:.3f}, {share}, {t['time_share']:.0%}"


def table(results: list[dict]) -> str:
    lines = [
        "| model | registry holds | plain: final est. µs (s to reach) | registry tune: s to reach it | ratio "
        "| ratio within 1% / 2% / 5% | registry tune: total s, final est. µs | e2e ms: untuned / plain / registry "
        "| transfer from it: e2e ms, share of plain's speed-up, share of plain's time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = f"{r['time_ratio']:.2f}" if r["time_ratio"] is not None else "not reached"
        reach = f"{r['registry_time_to_target_s']:.0f}" if r["registry_time_to_target_s"] is not None else "-"
        within = " / ".join(
            f"{ours / plain:.2f}" if ours is not None and plain else "-" for plain, ours in r["within"].values()
        )
        e = r["e2e_ms"]
        default = r.get("plain_default_builder")
        if default:  # what a user gets today, with TVM's own LocalBuilder
            lines.append(
                f"| {r['model']} (plain with TVM's LocalBuilder) | - | {default['final_est_us']:.0f} "
                f"({default['seconds']:.0f} s run) | - | - | - | - | - | - |"
            )
        lines.append(
            f"| {r['model']} | {r['registry_of']} | {r['plain_final_est_us']:.0f} ({r['plain_time_to_target_s']:.0f}) "
            f"| {reach} | {ratio} | {within} | {r['registry_s']:.0f}, {r['registry_final_est_us']:.0f} "
            f"| {e['untuned']:.3f} / {e['plain']:.3f} / {e['registry']:.3f} | {_transfer_cell(r, e)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert-tiny", "bert-mini"])
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "tuning")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tuning.json")
    parser.add_argument("--replot", action="store_true", help="redraw the plot and table from --out, measure nothing")
    parser.add_argument("--target", default="host", help='"host", "cuda" (the GPU present) or a TVM target as JSON')
    parser.add_argument(
        "--default-builder", action="store_true", help="also run plain tune_relax with TVM's own LocalBuilder"
    )
    args = parser.parse_args()
    if args.replot:
        results = json.loads(args.out.read_text())
        plot(results, args.out.with_suffix(".png"))
        print(table(results))
        return
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)

    from registry.tvm_side.target import runtime_threads, target_from_option

    target, threads = target_from_option(args.target), runtime_threads()
    args.work.mkdir(parents=True, exist_ok=True)
    results = []
    for i, name in enumerate(args.models):
        donor = args.models[(i + 1) % len(args.models)]
        results.append(compare(name, donor, args.work, args.trials_per_task, target, threads, args.default_builder))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(stamped(results), indent=1))
    plot(results, args.out.with_suffix(".png"))
    print(table(results))


if __name__ == "__main__":
    main()
