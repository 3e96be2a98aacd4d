"""``make demo``: build a small model in code, tune it into the registry, and show what was gained.

Run as ``python -m registry.pipeline.demo [--trials N]``; it writes to the configured registry (by default the
embedded SQLite file).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time

from tvm.s_tir import meta_schedule as ms

from registry.measure.builder import PersistentBuilder
from registry.measure.jobs import time_model
from registry.measure.measurer import Measurer
from registry.records.database import RegistryDatabase
from registry.store.factory import open_storage
from registry.store.rows import ModelIn
from registry.tvm_side import zoo
from registry.tvm_side.compat import META_SCHEDULE_LOGGER, prepare_tuning
from registry.tvm_side.compile import compile_model, task_module
from registry.tvm_side.frontend import load_onnx
from registry.tvm_side.signature import structural_hash, workload_in
from registry.tvm_side.target import host_target, runtime_threads

MODEL = "demo-mlp"


def main() -> None:
    args = _arguments()
    if not args.verbose:  # MetaSchedule logs every batch at INFO; a newcomer needs the outcome
        logging.getLogger(META_SCHEDULE_LOGGER).setLevel(logging.ERROR)

    storage = open_storage(args.db)
    loaded = load_onnx(zoo.mlp().SerializeToString(), {"x": [16, 128]}, name=MODEL)
    target = host_target()
    threads = runtime_threads()
    print(f"registry: {storage.url}")
    print(f"model {MODEL}: a 2-layer MLP built in code, target {target}, {threads} runtime thread(s)")

    zmod = task_module(loaded.mod, target)
    tasks = ms.relax_integration.extract_tasks(zmod, target)
    tasks_in = [(workload_in(t.dispatched[0], task_name=t.task_name), t.task_name, t.weight) for t in tasks]
    storage.save_model(ModelIn(loaded.name, loaded.sha256, loaded.input_shapes, tasks_in))
    print(f"{len(tasks)} tasks: " + ", ".join(f"{t.task_name} (x{t.weight})" for t in tasks))

    measurer = Measurer(target, threads)  # end-to-end timings run in its worker processes

    def latency_ms(database) -> float:
        executable = compile_model(database, loaded.mod, target)
        return time_model(measurer, executable, loaded.inputs).median_s * 1e3

    untuned = latency_ms(ms.database.MemoryDatabase())
    tvm_database = RegistryDatabase(
        target,
        storage,
        device=measurer.device,
        model=MODEL,
        task_names={structural_hash(t.dispatched[0]): t.task_name for t in tasks},
    )
    before = len(tvm_database)
    print(f"tuning {args.trials} trials with MetaSchedule, every record written to the registry as it is measured ...")
    tune_s = _tune(zmod, target, tasks, args.trials, tvm_database)
    tuned = latency_ms(tvm_database)
    measurer.close()
    written = len(tvm_database) - before
    print(f"\ntuned {args.trials} trials in {tune_s:.0f} s; {written} record(s) written to the registry")
    print(f"end-to-end latency: untuned {untuned:.3f} ms -> tuned {tuned:.3f} ms ({untuned / tuned:.1f}x faster)")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32, help="total tuning trials across the model's tasks")
    parser.add_argument("--db", default=None, help="database URL (default: the configured registry)")
    parser.add_argument("--verbose", action="store_true", help="show MetaSchedule's own log")
    return parser.parse_args()


def _tune(zmod, target, tasks: list, trials: int, tvm_database: RegistryDatabase) -> float:
    """MetaSchedule's own ``tune_relax``, every record written to the registry through ``tvm_database``; returns the
    seconds it took."""
    start = time.perf_counter()
    prepare_tuning()
    with tempfile.TemporaryDirectory() as work_dir:
        ms.relax_integration.tune_relax(
            zmod,
            {},
            target,
            work_dir,
            max_trials_global=trials,
            # every task gets trials even from a small budget (MetaSchedule gives each round to one task)
            num_trials_per_iter=max(1, min(16, trials // len(tasks))),
            database=tvm_database,
            seed=1,
            builder=PersistentBuilder(),
        )
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
