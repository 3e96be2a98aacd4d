"""Transfer benchmark: leave-one-out transfer-tuning against full MetaSchedule tuning of the same model.

    .venv/bin/python bench/transfer_bench.py [--models resnet18 resnet50 ...] [--trials-per-task 32] [--budget 8]

1. **Full tuning.** Every model of the zoo, at each of its two input shapes, is tuned by MetaSchedule's
   ``tune_relax`` (evolutionary search, XGBoost cost model, LocalRunner) with ``--trials-per-task`` trials per task;
   its logs are kept under ``--work`` and reused by later runs of this script. Its wall time is the search time of
   full tuning. The builder is registry's PersistentBuilder: TVM's default LocalBuilder times out every build on the
   machine this was written on (see registry/measure/builder.py), so it cannot be the baseline here.
2. **Leave-one-out transfer.** For each held-out model variant, a fresh registry gets the logs of every *other*
   model (both shapes of the held-out model are left out), then ``transfer()`` runs on the held-out variant.
3. **One run, three latencies.** Untuned, transferred and fully tuned builds of the held-out variant are timed
   back to back, three rounds, medians: the ratios come from one process on one machine state.

Figures per variant: transfer's speedup over untuned as a fraction of full tuning's (``full_ms / transfer_ms``), and
transfer's search time as a fraction of full tuning's. Results: bench/results/transfer.json and the table printed at
the end (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine_speed import stamped  # noqa: E402
from registry.tvm_side import zoo  # noqa: E402

# Two input shapes per family: image size for the CNNs, sequence length for the encoders.
SHAPES = {"cnn": ({"image": 64}, {"image": 96}), "bert": ({"seq": 32}, {"seq": 64})}
FAMILY = {name: ("bert" if name.startswith("bert") else "cnn") for name in zoo.ZOO if name != "mlp"}


def variants(models: list[str]) -> list[tuple[str, str, dict]]:
    """(variant name, model name, builder kwargs) for every model at both shapes."""
    out = []
    for name in models:
        for kwargs in SHAPES[FAMILY[name]]:
            tag = "-".join(f"{k}{v}" for k, v in kwargs.items())
            out.append((f"{name}-{tag}", name, kwargs))
    return out


def load(variant: tuple[str, str, dict]):
    from registry.tvm_side.frontend import load_onnx

    vname, name, kwargs = variant
    return load_onnx(zoo.ZOO[name](**kwargs).SerializeToString(), name=vname)


def full_tune(variant, work: Path, trials_per_task: int, target) -> dict:
    """Tune with plain MetaSchedule into ``work/<variant>``; reuse a finished earlier run."""
    from tvm.s_tir import meta_schedule as ms

    from registry.measure.builder import PersistentBuilder
    from registry.tvm_side.compat import prepare_tuning
    from registry.tvm_side.compile import task_module

    folder = work / variant[0]
    meta_file = folder / "meta.json"
    if meta_file.exists():
        return json.loads(meta_file.read_text())
    loaded = load(variant)
    # the registry's tasks (a CPU convolution's weight layout-free), so that both sides tune the same set
    zero = task_module(loaded.mod, target)
    tasks = ms.relax_integration.extract_tasks(zero, target)
    trials = trials_per_task * len(tasks)
    print(f"  full tuning {variant[0]}: {len(tasks)} tasks, {trials} trials", flush=True)
    prepare_tuning()
    builder = PersistentBuilder()
    start = time.perf_counter()
    ms.relax_integration.tune_relax(
        zero, {}, target, str(folder), max_trials_global=trials, num_trials_per_iter=16, builder=builder, seed=1
    )
    meta = {"tune_s": time.perf_counter() - start, "trials": trials, "tasks": len(tasks)}
    builder.shutdown()
    meta_file.write_text(json.dumps(meta))
    print(f"  done in {meta['tune_s']:.0f} s", flush=True)
    return meta


def latency_rounds(executables: dict, loaded, rounds: int = 3) -> dict[str, float]:
    from registry.measure.jobs import interleaved_model_ms
    from registry.measure.measurer import Measurer
    from registry.tvm_side.target import host_target

    with Measurer(host_target()) as measurer:
        return interleaved_model_ms(measurer, executables, loaded.inputs, rounds)


def leave_one_out(held_out, others: list, work: Path, target, threads: int, budget: int, meta: dict) -> dict:
    from tvm.s_tir import meta_schedule as ms

    from registry.pipeline.transfer import ModelTransferOptions, transfer
    from registry.share.log_import import import_logs
    from registry.store.sql.store import Store
    from registry.tvm_side.compile import compile_model

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/registry.db")
        for other in others:
            import_logs(store, work / other[0], model=other[0], num_threads=threads)
        loaded = load(held_out)
        # tune_trials=0: this benchmark measures transfer alone; tasks no donor helped stay on the default
        report = transfer(store, loaded, target, threads, ModelTransferOptions(candidates=budget, tune_trials=0))
        full_db = ms.database.JSONDatabase(work_dir=str(work / held_out[0]))
        exes = {
            "untuned": compile_model(ms.database.MemoryDatabase(), loaded.mod, target),
            "transfer": ms.relax_integration.compile_relax(
                registry_db(store, target, threads), loaded.mod, target, None
            ),
            "full": compile_model(full_db, loaded.mod, target),
        }
        lat = latency_rounds(exes, loaded)
        store.close()
    sources = report.as_json()["sources"]
    return {
        "variant": held_out[0],
        "tasks": len(report.tasks),
        "sources": sources,
        "untuned_ms": lat["untuned"],
        "transfer_ms": lat["transfer"],
        "full_ms": lat["full"],
        "speedup_full": lat["untuned"] / lat["full"],
        "speedup_transfer": lat["untuned"] / lat["transfer"],
        "fraction_of_full_speedup": lat["full"] / lat["transfer"],
        "full_search_s": meta["tune_s"],
        "full_trials": meta["trials"],
        "transfer_search_s": report.timings.finding_s,
        "transfer_total_s": report.timings.total_s,
        "search_time_ratio": report.timings.finding_s / meta["tune_s"],
        "candidates": sum(t.candidates for t in report.tasks),
    }


def registry_db(store, target, threads):  # noqa: N802 - reads as the database it returns
    from registry.records.database import RegistryDatabase

    return RegistryDatabase(target, store, num_threads=threads)


def table(rows: list[dict]) -> str:
    head = (
        "| held-out model | tasks | exact/transferred/default | untuned ms | full-tuned ms | transferred ms "
        "| share of full speedup | full search s | transfer search s | search time ratio |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        s = r["sources"]
        lines.append(
            f"| {r['variant']} | {r['tasks']} | {s['exact']}/{s['transferred']}/{s['default']} "
            f"| {r['untuned_ms']:.2f} | {r['full_ms']:.3f} | {r['transfer_ms']:.3f} "
            f"| {100 * r['fraction_of_full_speedup']:.0f}% | {r['full_search_s']:.0f} | {r['transfer_search_s']:.1f} "
            f"| {100 * r['search_time_ratio']:.1f}% |"
        )
    if rows:
        frac = statistics.median(r["fraction_of_full_speedup"] for r in rows)
        ratio = statistics.median(r["search_time_ratio"] for r in rows)
        lines.append(f"| **median** | | | | | | **{100 * frac:.0f}%** | | | **{100 * ratio:.1f}%** |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=[m for m in zoo.ZOO if m != "mlp"], choices=list(FAMILY))
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--budget", type=int, default=8, help="transfer candidates per task")
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "transfer")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "transfer.json")
    parser.add_argument("--tune-only", action="store_true", help="only the full-tuning phase")
    parser.add_argument("--skip", nargs="*", default=[], help="variant names to leave out, e.g. resnet50-image96")
    args = parser.parse_args()
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.ERROR)

    from registry.tvm_side.target import host_target, runtime_threads

    target, threads = host_target(), runtime_threads()
    work = args.work / f"t{args.trials_per_task}"
    work.mkdir(parents=True, exist_ok=True)
    all_variants = [v for v in variants(args.models) if v[0] not in args.skip]
    print(f"target {target}, {threads} thread(s); {len(all_variants)} model variants", flush=True)
    metas = {v[0]: full_tune(v, work, args.trials_per_task, target) for v in all_variants}
    if args.tune_only:
        return
    rows = []
    for held_out in all_variants:
        others = [v for v in all_variants if v[1] != held_out[1]]
        print(f"  leave-one-out: {held_out[0]} from {len(others)} other variants", flush=True)
        rows.append(leave_one_out(held_out, others, work, target, threads, args.budget, metas[held_out[0]]))
        print("  " + json.dumps(rows[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            stamped({"target": str(target), "threads": threads, "trials_per_task": args.trials_per_task, "rows": rows}),
            indent=2,
        )
    )
    print(table(rows))


if __name__ == "__main__":
    main()
