"""The GPU benchmark (``make bench-gpu``, issue #22): `registry` against plain MetaSchedule and PyTorch on the GPU of
the machine it runs on, in resumable steps that each fit the GPU machine's 10-minute cap per command.

    python bench/gpu/run.py --work /tmp/gpu-bench STEP [STEP ...]      # each step skips itself when done
    python bench/gpu/run.py --work /tmp/gpu-bench all --until 540      # every step not done yet, for 540 s at most

Models (bench/corpus/catalogue.py): two BERT sizes, gpu-bert-l2-h128 (1x32 ids) and gpu-bert-l2-h192 (1x48), and a
ViT, gpu-vit-l2-h128 (64x64): the models of issue #22's H100 table. Steps, in order:

- ``start``: how long a CUDA measurement worker takes to start (exec'd: it imports TVM) against a CPU one (forked);
- ``torch``: PyTorch eager, ``torch.compile`` and ``reduce-overhead`` (bench/gpu/torch_ref.py, its own process);
- ``plain``: plain ``tune_relax`` of gpu-bert-l2-h192, 16 trials per task (224), PersistentBuilder;
- ``tune-empty``: ``registry tune`` of gpu-bert-l2-h192 on an empty registry, the same trial cap;
- ``tune-h128``: ``registry tune`` of gpu-bert-l2-h128 on an empty registry (the sibling's registry);
- ``tune-over``: ``registry tune`` of gpu-bert-l2-h192 over a copy of that registry, its predictor trained first;
- ``transfer``: ``registry transfer`` of gpu-bert-l2-h192 from a copy of that registry (no fallback tuning);
- ``tune-vit``: ``registry tune`` of gpu-vit-l2-h128 on an empty registry;
- ``check``: ``registry check`` of every registry written: the records that do not replay on their workload;
- ``e2e``: every model compiled with each registry and with none (DLight's defaults), timed in turn, 3 rounds;
  the default schedule of each gpu-bert-l2-h192 task, for the curves;
- ``outputs``: every model compiled with DLight's defaults and with each registry written for it, run on the GPU in
  this process, against onnxruntime on the CPU with the same inputs (the largest difference, relative to the output's
  largest value): the tuned kernels compute the model;
- ``noise``: gpu-bert-l2-h128 compiled with its registry (tune-h128's) and loaded afresh into the worker 8 times,
  each load timed twice, then timed again after the GPU sat idle for 5 s: how much a whole model's time on the GPU
  moves between measurements of the same code (on the H200 it fell from 152-169 µs to 141.5 µs over the first 3 s);
- ``report``: ``--out`` (JSON with the machine, commit and date) and the table for docs/GPU.md.

``--stand-in`` runs the steps on a machine without a GPU, with tests/gpu_standin.py's made-up latencies: a check that
the script works before GPU time is spent on it, whose numbers mean nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# After an installed package (the GPU machine's wheel): only bench/ and tests/ come from the checkout.
sys.path.append(str(ROOT))

SMALL, BIG, VIT = "gpu-bert-l2-h128", "gpu-bert-l2-h192", "gpu-vit-l2-h128"
MODELS = (SMALL, BIG, VIT)
TRIALS_PER_TASK = 16
STEPS = ("start", "torch", "plain", "tune-empty", "tune-h128", "tune-over", "transfer", "tune-vit", "check", "e2e",
         "outputs", "noise", "report")  # fmt: skip
# Every registry a step writes, by step: what `check` and `e2e` read.
REGISTRIES = {
    "plain": (BIG, "plain-gpu-bert-l2-h192.db"),
    "tune-empty": (BIG, "tune-empty.db"),
    "tune-h128": (SMALL, "tune-h128.db"),
    "tune-over": (BIG, "tune-over.db"),
    "transfer": (BIG, "transfer.db"),
    "tune-vit": (VIT, "tune-vit.db"),
}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0)


class Bench:
    def __init__(self, work: Path, stand_in: bool, trials_per_task: int, seconds: float | None) -> None:
        self.work, self.stand_in = work, stand_in
        self.trials_per_task, self.seconds = trials_per_task, seconds
        work.mkdir(parents=True, exist_ok=True)
        from registry.tvm_side.target import target_from_option

        self.target = target_from_option("cuda") if not stand_in else _stand_in_target()
        if stand_in:
            from registry.pipeline import model_run as pipeline
            from tests.gpu_standin import StandInGpuMeasurer

            pipeline.Measurer = StandInGpuMeasurer

    def done(self, step: str) -> dict | None:
        path = self.work / f"{step}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def save(self, step: str, result: dict) -> dict:
        (self.work / f"{step}.json").write_text(json.dumps(result, indent=1))
        return result

    def written(self, model: str | None = None) -> dict[str, Path]:
        """Step -> the registry it wrote, for the steps done (of ``model``, if given)."""
        return {step: self.work / name for step, (m, name) in REGISTRIES.items()
                if self.done(step) is not None and model in (None, m)}  # fmt: skip

    def measurer(self):
        if self.stand_in:
            from tests.gpu_standin import StandInGpuMeasurer

            return StandInGpuMeasurer(self.target)
        from registry.measure.measurer import Measurer

        return Measurer(self.target)

    # -- steps --------------------------------------------------------------------------------------------------

    def start(self) -> dict:
        """Seconds from asking for a GPU worker to its answer to ``describe`` (which initializes CUDA there), five times
        each way: forked by the zygote (what a GPU pool does), and exec'd (its fallback); the zygote's own start, the
        first time, is reported apart."""
        from registry.measure import zygote
        from registry.measure.pool import EXEC, FORK, WorkerPool

        t0 = time.perf_counter()
        zygote.shared()
        with WorkerPool(1) as pool:
            pool.call({"op": "warm"}, timeout=120)
        out: dict = {"zygote_first_s": time.perf_counter() - t0}
        for start in (FORK, EXEC):
            samples, how = [], set()
            for _ in range(5):
                t0 = time.perf_counter()
                with WorkerPool(1, start=start, gpu=True) as pool:
                    reply = pool.call({"op": "describe", "device": "cpu" if self.stand_in else "cuda"}, timeout=120)
                    how.add(pool._all[0].start)
                samples.append(time.perf_counter() - t0)
                assert "error" not in reply, reply
            out[start] = {"median_s": statistics.median(samples), "samples_s": samples, "started_by": sorted(how)}
        return out

    def torch(self) -> dict:
        out = self.work / "torch-raw.json"
        cmd = [sys.executable, str(ROOT / "bench" / "gpu" / "torch_ref.py"), "--models", *MODELS, "--out", str(out)]
        subprocess.run(cmd, check=True)
        return {"models": json.loads(out.read_text())}

    def plain(self) -> dict:
        from bench.tuning.run import plain
        from registry.tvm_side.target import runtime_threads

        return plain(BIG, self.work, self.trials_per_task, self.target, runtime_threads())

    def _tune(self, model: str, db_name: str, over: str | None = None) -> dict:
        """``registry tune`` of ``model`` into ``db_name`` (over a copy of ``over``), as many trials per task as
        plain's, and at most ``--seconds``."""
        from bench.sqlite_copy import copy_sqlite
        from bench.tuning.run import load
        from registry.pipeline.tune import ModelTuneOptions, tune
        from registry.pipeline.tuning_policy import EngineOptions
        from registry.store.sql.store import Store

        db = self.work / db_name
        db.unlink(missing_ok=True)
        train_s = metrics = None
        if over is not None:
            copy_sqlite(self.work / over, db)
        store = Store(f"sqlite:///{db}")
        if over is not None:  # what a team would do once per device: train the predictor on what it has
            from registry.errors import RegistryError
            from registry.tvm_side import predictor

            t0 = time.perf_counter()
            device_id = store.all_devices()[0].id
            try:
                model_, metrics = predictor.train(store, device_id)
                predictor.save(store, device_id, model_, metrics)
            except RegistryError as e:  # too few records to train on: tuning goes on without it
                metrics = {"not trained": str(e)}
            train_s = time.perf_counter() - t0
        loaded = load(model)
        from registry.pipeline.model_run import extract

        n_tasks = len(extract(store, loaded, self.target))
        options = ModelTuneOptions(engine=EngineOptions(trials=self.trials_per_task * n_tasks, seconds=self.seconds))
        started, t0 = _now(), time.perf_counter()
        report = tune(store, loaded, self.target, None, options)
        return {"seconds": time.perf_counter() - t0, "started": started.isoformat(), "db": str(db),
                "predictor_train_s": train_s, "predictor_metrics": metrics, "report": report.as_json()}  # fmt: skip

    def tune_empty(self) -> dict:
        return self._tune(BIG, "tune-empty.db")

    def tune_h128(self) -> dict:
        return self._tune(SMALL, "tune-h128.db")

    def tune_over(self) -> dict:
        return self._tune(BIG, "tune-over.db", over="tune-h128.db")

    def tune_vit(self) -> dict:
        return self._tune(VIT, "tune-vit.db")

    def transfer(self) -> dict:
        from bench.sqlite_copy import copy_sqlite
        from bench.tuning.run import load
        from registry.pipeline.transfer import ModelTransferOptions, transfer
        from registry.store.sql.store import Store

        db = self.work / "transfer.db"
        copy_sqlite(self.work / "tune-h128.db", db)
        t0 = time.perf_counter()
        options = ModelTransferOptions(tune_trials=0)
        report = transfer(Store(f"sqlite:///{db}"), load(BIG), self.target, None, options)
        return {"seconds": time.perf_counter() - t0, "db": str(db), "report": report.as_json(),
                "tasks_transferred": sum(t.source == "transferred" for t in report.tasks)}  # fmt: skip

    def check(self) -> dict:
        from registry.records.audit import audit
        from registry.store.sql.store import Store

        out = {}
        for step, path in self.written().items():
            with Store(f"sqlite:///{path}") as store:
                r = audit(store, dry_run=True)
            out[step] = {"records": r.checked, "not_replaying": r.bad, "first": r.first}
        return out

    def e2e(self) -> dict:
        from tvm.s_tir import meta_schedule as ms

        from bench.tuning.run import load
        from registry.measure.jobs import interleaved_model_ms, module_job
        from registry.pipeline.model_run import extract
        from registry.store.sql.store import Store
        from registry.tvm_side.compile import compile_model
        from registry.tvm_side.defaults import default_schedule

        out: dict = {}
        with self.measurer() as measurer:
            for model in MODELS:
                loaded = load(model)
                dbs = {"dlight": ms.database.MemoryDatabase()}
                dbs.update({step: _database(path, self.target) for step, path in self.written(model).items()})
                exes = {k: compile_model(db, loaded.mod, self.target) for k, db in dbs.items()}
                out[model] = {"ms": interleaved_model_ms(measurer, exes, loaded.inputs, rounds=3)}
            # each task's default schedule, the start of the tuning curves of gpu-bert-l2-h192
            with Store(f"sqlite:///{self.work / 'defaults.db'}") as store:  # a scratch registry: tasks by name
                tasks = extract(store, load(BIG), self.target)
                timed = measurer.kernels([module_job(default_schedule(t.mod, self.target), self.target, t.arguments)
                                          for t in tasks])  # fmt: skip
            out["defaults_us"] = {t.name: m.median_us for t, m in zip(tasks, timed, strict=True)}
        return out

    def outputs(self) -> dict:
        if self.stand_in:  # nothing can run on a GPU that is not there
            return {"skipped": "stand-in: no GPU"}
        import tvm

        out: dict = {}
        for model in MODELS:
            dbs = {"dlight": None}
            dbs.update({step: _database(path, self.target) for step, path in self.written(model).items()})
            out[model] = {k: output_error(model, db, self.target, tvm.cuda(0)) for k, db in dbs.items()}
        return out

    def noise(self) -> dict:
        from bench.tuning.run import load
        from registry.measure.jobs import model_job
        from registry.tvm_side.compile import compile_model

        loaded = load(SMALL)
        exe = compile_model(_database(self.work / REGISTRIES["tune-h128"][1], self.target), loaded.mod, self.target)
        loads = []
        with self.measurer() as measurer:
            for _ in range(8):
                with model_job(exe, loaded.inputs) as job:
                    loads.append([measurer.model(job).median_s * 1e6 for _ in range(2)])
            time.sleep(5)
            with model_job(exe, loaded.inputs) as job:
                after_idle = [measurer.model(job).median_s * 1e6 for _ in range(3)]
        return {"model": SMALL, "loads_us": loads, "after_5s_idle_us": after_idle}

    def report(self) -> dict:
        return assemble(self)


def output_error(model: str, db, target, dev) -> float:
    """``model`` compiled with ``db`` (None: no records) and run on ``dev``, against onnxruntime on the CPU, same
    inputs: the largest difference over its outputs, relative to each output's largest value."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from bench.corpus.catalogue import BY_NAME, materialize
    from bench.tuning.run import load
    from registry.tvm_side.compile import compile_model
    from registry.tvm_side.onnx_inputs import input_specs, make_inputs
    from registry.tvm_side.onnx_prep import fixed_input_shapes

    path = materialize(BY_NAME[model])
    graph = onnx.load(str(path))
    feeds = make_inputs(input_specs(graph, fixed_input_shapes(graph, BY_NAME[model].shapes)), seed=0)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    loaded = load(model)
    exe = compile_model(db if db is not None else ms.database.MemoryDatabase(), loaded.mod, target)
    got = relax.VirtualMachine(exe, dev)["main"](*(tvm.runtime.tensor(feeds[i.name], dev) for i in loaded.inputs))
    got = [got.numpy()] if hasattr(got, "numpy") else [g.numpy() for g in got]  # one output, or a tuple
    return max(float(np.abs(w.astype(np.float64) - g).max() / max(float(np.abs(w).max()), 1e-30))
               for w, g in zip(want, got, strict=True))  # fmt: skip


def _database(path: Path, target):
    """A registry's records for the one device it holds (whatever this machine's driver string says now)."""
    from registry.records.database import RegistryDatabase
    from registry.store.decode import device_spec
    from registry.store.sql.store import Store

    store = Store(f"sqlite:///{path}")
    [row] = store.all_devices()
    spec = device_spec(row)
    return RegistryDatabase(spec.target, store, device=spec)


def _stand_in_target():
    from tvm.target import Target

    return Target({"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
                   "max_shared_memory_per_block": 49152, "thread_warp_size": 32})  # fmt: skip


# -- the report -------------------------------------------------------------------------------------------------


def _curve(bench: Bench, db: str, started: str, defaults_us: dict[str, float]) -> list[tuple[float, float]]:
    from bench.tuning.run import curve, load
    from registry.pipeline.model_run import extract
    from registry.store.sql.store import Store

    with Store(f"sqlite:///{bench.work / db}") as store:
        tasks = extract(store, load(BIG), bench.target)
        defaults = {t.workload_id: defaults_us.get(t.name) or float("inf") for t in tasks}
        return curve(store, load(BIG), bench.target, store.all_devices()[0].id, started, defaults)


def assemble(bench: Bench) -> dict:
    from bench.tuning.run import time_to

    steps = {s: bench.done(s) for s in STEPS if s != "report"}
    e2e = steps["e2e"] or {}
    result: dict = {"machine": machine(bench.stand_in), "steps": steps}
    plain, empty = steps["plain"], steps["tune-empty"]
    if plain and empty and e2e.get("defaults_us"):
        plain_curve = _curve(bench, REGISTRIES["plain"][1], plain["started"], e2e["defaults_us"])
        ours = _curve(bench, REGISTRIES["tune-empty"][1], empty["started"], e2e["defaults_us"])
        goal = plain_curve[-1][1]
        plain_t, our_t = time_to(plain_curve, goal), time_to(ours, goal)
        result["convergence"] = {
            "plain_final_est_us": goal, "plain_s": plain["seconds"], "plain_time_to_final_s": plain_t,
            "registry_final_est_us": ours[-1][1], "registry_s": empty["seconds"], "registry_time_to_plain_s": our_t,
            "time_ratio": our_t / plain["seconds"] if our_t is not None else None,
            "within": {f"{p}%": time_to(ours, goal * (1 + p / 100)) for p in (1, 2, 5)},
            "plain_curve": plain_curve, "registry_curve": ours,
        }  # fmt: skip
    big = e2e.get(BIG, {}).get("ms", {})
    if steps["transfer"] and big.get("transfer") and big.get("plain") and big.get("dlight"):
        plain_gain = big["dlight"] / big["plain"] - 1
        result["sibling_transfer"] = {
            "speedup_share": (big["dlight"] / big["transfer"] - 1) / plain_gain if plain_gain > 0 else None,
            "time_share": steps["transfer"]["seconds"] / plain["seconds"] if plain else None,
        }
    return result


def machine(stand_in: bool) -> dict:
    def run(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return ""

    from registry import hostinfo

    return {
        "gpu": run("nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader") or None,
        "stand_in": stand_in,
        "cpu": hostinfo.cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "tvm": hostinfo.tvm_version(),
        "commit": os.environ.get("REGISTRY_COMMIT") or run("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"),
        "date": _now().isoformat(),
    }


def table(result: dict) -> str:
    lines = ["| model | DLight ms | plain tune_relax ms | registry tune ms (empty / over sibling) | transfer ms "
             "| torch eager / compile / reduce-overhead ms |", "|---|---|---|---|---|---|"]  # fmt: skip
    e2e = result["steps"].get("e2e") or {}
    torch = {r["model"]: r["ms"] for r in (result["steps"].get("torch") or {}).get("models", [])}

    def cell(ms: float | None) -> str:
        return f"{ms:.3f}" if ms else "-"

    for model in MODELS:
        ms = e2e.get(model, {}).get("ms", {})
        tuned = ms.get("tune-empty") or ms.get("tune-h128") or ms.get("tune-vit")
        t = torch.get(model, {})
        lines.append(
            f"| {model} | {cell(ms.get('dlight'))} | {cell(ms.get('plain'))} | {cell(tuned)} / "
            f"{cell(ms.get('tune-over'))} | {cell(ms.get('transfer'))} | "
            f"{cell(t.get('eager'))} / {cell(t.get('compile'))} / {cell(t.get('reduce-overhead'))} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps", nargs="+", choices=(*STEPS, "all"))
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "gpu")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu.json")
    parser.add_argument("--until", type=float, help="with all: start no step after this many seconds")
    parser.add_argument("--stand-in", action="store_true", help="no GPU here: made-up latencies (a smoke test)")
    parser.add_argument("--again", action="store_true", help="run the named steps even if done")
    parser.add_argument("--trials-per-task", type=int, default=TRIALS_PER_TASK, help="plain's, and registry's cap")
    parser.add_argument("--seconds", type=float, default=150.0, help="the most each registry tune may take")
    args = parser.parse_args()
    start = time.perf_counter()
    bench = Bench(args.work, args.stand_in, args.trials_per_task, args.seconds)
    steps = STEPS if "all" in args.steps else args.steps
    for step in steps:
        if args.until is not None and time.perf_counter() - start > args.until:
            print(f"stopping before {step}: {args.until:.0f} s spent; run again to go on", flush=True)
            break
        if bench.done(step) is not None and not args.again and step != "report":
            continue
        print(f"== {step}", flush=True)
        t0 = time.perf_counter()
        try:
            result = getattr(bench, step.replace("-", "_"))()
        except Exception:  # noqa: BLE001 - left undone (a later run tries it again); the other steps go on
            traceback.print_exc()
            print(f"== {step} FAILED after {time.perf_counter() - t0:.0f} s", flush=True)
            continue
        result["step_s"] = time.perf_counter() - t0
        bench.save(step, result)
        print(f"== {step} done in {result['step_s']:.0f} s", flush=True)
        if step == "report":
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
            if result.get("convergence"):
                plot(result, args.out.with_suffix(".png"))
            print(table(result))


if __name__ == "__main__":
    main()


def plot(result: dict, path: Path) -> None:
    """Estimated latency of gpu-bert-l2-h192 (each task's best so far x its weight, summed) against wall time: plain
    tune_relax and registry tune on an empty registry, with plain's final value and a third of plain's time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = result["convergence"]
    fig, ax = plt.subplots(figsize=(7, 4))
    from bench.tuning.run import step_curve

    step_curve(ax, c["plain_curve"], c["plain_s"], "plain tune_relax")
    step_curve(ax, c["registry_curve"], c["registry_s"], "registry tune (empty registry)")
    ax.axhline(c["plain_final_est_us"], color="grey", linestyle=":", linewidth=1, label="plain's final")
    ax.axvline(c["plain_s"] / 3, color="grey", linestyle="--", linewidth=1, label="a third of plain's time")
    ax.set_ylim(c["plain_final_est_us"] * 0.85, c["plain_final_est_us"] * 1.6)
    ax.set_xlabel("wall time, s")
    ax.set_ylabel("estimated model latency, µs")
    ax.set_title(f"{BIG} on {result['machine']['gpu'] or 'no GPU'}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
