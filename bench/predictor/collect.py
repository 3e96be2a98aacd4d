"""Measured programs to train predictors on: random schedules from MetaSchedule's design spaces, TenSet's way.

    .venv/bin/python bench/predictor/collect.py --budget 90m [--db URL] [--per-workload 64] [--scale F] [MODEL ...]

Every task of the corpus models (``bench/corpus``; the starter bundle was tuned on the same models) is stored as a
workload; then, round after round, each workload short of ``--per-workload`` programs gets ``--batch`` more: schedules
sampled by MetaSchedule's ``ReplayTrace`` (a design space's trace with every decision drawn anew:
``registry.pipeline.design_space``), built by the
registry's builder pool and timed by its one measurer (``QUICK``), on one runtime thread, one program at a time.
Each program is stored as a record of this machine's device (source "tuned", model = the first corpus model that has
the task), failed builds and runs included: a predictor learns from those too.

``--scale F`` (repeatable) imports each model again at other input shapes instead: token sequences, audio and image
sides times F (the dimensions the corpus exports as dynamic), filed as the model ``NAME@xF``. Those are more
workloads of the same operators; ``evaluate.py`` trains on them but never judges them, and holds a model's variants
out with it.

It resumes: a workload's stored programs count toward its quota, and a schedule already stored is not measured again.
Rounds go across all workloads, so a run stopped by its budget leaves every workload with about as many programs.
Prints its rate as it goes and a JSON summary at the end.

This is a bench script, not a ``registry`` command: the records are for training the shipped predictors, kept in a
dataset registry of their own (default ``bench/predictor/data/collect.db``). They are quick timings of schedules whose
outputs were never checked (``registry tune`` checks a candidate before it can become a task's best), so they are
never synced into a registry that compiles models. A user's own predictor trains on their tuning records
(``registry predictor train``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DEFAULT_DB = ROOT / "bench" / "predictor" / "data" / "collect.db"


@dataclass
class Workload:
    workload_id: int
    ident: tuple[str, str]
    task: str
    model: str
    mod: object  # IRModule
    arguments: tuple
    done: int = 0  # programs stored (ok or failed)
    traces: set | None = None  # trace hashes stored
    broken: str | None = None  # why no more of its schedules are sampled


def parse_seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def scaled_shapes(shapes: dict[str, list[int]], factor: float) -> dict[str, list[int]]:
    """``shapes`` with the image sides (of a 4-d input, to a multiple of 32: detectors downsample 5 times) and the
    sequence (of a 2-d input, to a multiple of 8) times ``factor``; other inputs (Whisper's fixed frames, a state)
    as they are."""

    def times(dim: int, step: int) -> int:
        return max(step, round(dim * factor / step) * step)

    out = {}
    for name, dims in shapes.items():
        if len(dims) == 4:
            dims = [*dims[:2], times(dims[2], 32), times(dims[3], 32)]
        elif len(dims) == 2:
            dims = [dims[0], times(dims[1], 8)]
        out[name] = list(dims)
    return out


def corpus_workloads(storage, target, names: list[str], scales: list[float] = ()) -> list[Workload]:
    """Every task of these corpus models, stored as workloads (each once, under the first model that has it); with
    ``scales``, of the models at each scale of their input shapes instead (``scaled_shapes``)."""
    from bench.corpus.catalogue import BY_NAME, materialize
    from registry.errors import RegistryError
    from registry.pipeline.model_run import extract
    from registry.tvm_side.compat import last_line
    from registry.tvm_side.frontend import load_onnx

    found: dict[int, Workload] = {}
    variants = [(n, f"{n}@x{f:g}", f) for f in scales for n in names] if scales else [(n, n, None) for n in names]
    for base, name, factor in variants:
        model = BY_NAME[base]
        shapes = model.shapes if factor is None else scaled_shapes(model.shapes, factor)
        try:
            path = materialize(model)
            tasks = stored_tasks(storage, name, hashlib.sha256(path.read_bytes()).hexdigest())
            if tasks is None:
                tasks = extract(storage, load_onnx(path, shapes, name=name), target)
        except Exception as e:  # noqa: BLE001 - a variant that TVM cannot import at its shapes is left out, said why
            if factor is None and not isinstance(e, RegistryError):
                raise  # the corpus as catalogued imports: anything else is a fault of this run
            print(f"  {name}: skipped ({last_line(str(e), type(e).__name__)[:200]})", flush=True)
            continue
        new = 0
        for t in tasks:
            if t.workload_id not in found:
                found[t.workload_id] = Workload(t.workload_id, t.ident, t.name, name, t.mod, t.arguments)
                new += 1
        print(f"  {name} {shapes}: {len(tasks)} tasks, {new} new ({len(found)} workloads)", flush=True)
    return list(found.values())


def stored_tasks(storage, name: str, sha256: str) -> list | None:
    """The tasks of a model an earlier run imported, from the registry (importing all 30 again takes 10 minutes);
    None when it is not stored."""
    import tvm

    from registry.measure.jobs import kernel_arguments
    from registry.pipeline.model_run import RunTask

    rows = storage.find_models(name, sha256)
    if not rows:
        return None
    tasks = storage.model_tasks(rows[0].id)
    stored = storage.workloads_by_id(sorted({t.workload_id for t in tasks}))
    found = []
    for t in tasks:
        w = stored[t.workload_id]
        mod = tvm.ir.load_json(w.mod_json)
        ident = (w.shash, w.module_equality)
        found.append(RunTask(t.task_name, t.weight, mod, ident, w.id, None, kernel_arguments(mod)))
    return found


def measure(w: Workload, candidates: list, target, builder, measurer) -> list:
    """Each candidate built by the pool and timed by the measurer: a Measurement per candidate, in order."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from registry.measure.jobs import artifact_job
    from registry.measure.types import QUICK, Measurement
    from registry.tvm_side.compat import last_line
    from registry.tvm_side.compile import scheduled_arguments

    built = builder.build([BuilderInput(c.sch.mod, target) for c, _ in candidates])
    results = [Measurement((), f"build failed: {last_line(b.error_msg, 'unknown error')}") for b in built]
    jobs = {
        i: artifact_job(b.artifact_path, scheduled_arguments(w.arguments, candidates[i][0].sch.mod))
        for i, b in enumerate(built)
        if not b.error_msg
    }
    try:
        # One at a time, not at the measurer's calibrated degree of parallelism: these timings are labels. The degree
        # is calibrated once, on the first batch (two at a time held 1.03x for a matrix product here, while a layer
        # norm slowed 1.25x beside a neighbour), and the dataset collected so, on a shared machine, reads 1.15-1.21x
        # slower at the median than its programs timed again alone (docs/BENCHMARKS.md, "How far the dataset's
        # timings can judge a ranking").
        for i, m in zip(jobs, measurer.kernels(list(jobs.values()), QUICK, 1), strict=True):
            results[i] = m
    finally:
        for b in built:
            if b.artifact_path:
                shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="corpus models (default: every one)")
    parser.add_argument("--db", default=f"sqlite:///{DEFAULT_DB}")
    parser.add_argument("--budget", default="60m", help="wall time: 90m, 2h, 3600 (seconds)")
    parser.add_argument("--per-workload", type=int, default=64, help="programs per workload")
    parser.add_argument("--batch", type=int, default=16, help="programs per workload per round")
    parser.add_argument("--threads", type=int, default=1, help="TVM runtime threads per measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--scale", type=float, action="append", default=[], help="the models at other input shapes (repeatable)"
    )
    parser.add_argument(
        "--mcpu", help="build for this LLVM CPU instead of this machine's (haswell: an AVX2 sibling of an AVX-512 CPU)"
    )
    args = parser.parse_args()
    if any(f <= 0 for f in args.scale):
        parser.error("--scale: a factor above 0 (1.5 imports the models at one and a half times their shapes)")
    deadline = time.monotonic() + parse_seconds(args.budget)

    from bench.corpus.catalogue import MODELS
    from registry import hostinfo
    from registry.measure.builder import PersistentBuilder
    from registry.measure.measurer import Measurer
    from registry.pipeline.design_space import sample
    from registry.records.write import RecordWriter
    from registry.store.factory import open_storage
    from registry.store.interface import RecordIn
    from registry.store.rows import FAILED_RUN_SECS
    from registry.tvm_side.compat import last_line, prepare_tuning
    from registry.tvm_side.target import host_target

    warnings.simplefilter("ignore")
    names = args.models or [m.name for m in MODELS]
    if args.db.startswith("sqlite:///"):
        Path(args.db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    storage = open_storage(args.db)
    target = host_target()
    if args.mcpu:
        from tvm.target import Target

        from registry.tvm_side.target import canonical_target

        target = Target({**canonical_target(target), "mcpu": args.mcpu})
    prepare_tuning()
    start = time.monotonic()
    with Measurer(target, args.threads) as measurer:
        device = measurer.device
        device_id = storage.add_device(device)
        print(f"device {device_id}: {device.name}; importing {len(names)} models", flush=True)
        workloads = corpus_workloads(storage, target, names, args.scale)
        for w in workloads:
            state = storage.tuning_state(w.workload_id, device_id)
            w.traces, w.done = set(state.traces), len(state.traces)
        writer = RecordWriter(storage)
        builder = PersistentBuilder()
        measured = failed = 0
        import_s = time.monotonic() - start
        print(f"{len(workloads)} workloads, {sum(w.done for w in workloads)} programs stored; import {import_s:.0f} s")
        rng = random.Random(args.seed)
        stop = None
        for quota in range(args.batch, args.per_workload + args.batch, args.batch):
            todo = [w for w in workloads if w.done < min(quota, args.per_workload) and not w.broken]
            rng.shuffle(todo)
            for w in todo:
                if time.monotonic() > deadline:
                    stop = "budget spent"
                    break
                try:
                    count, seed = min(quota, args.per_workload) - w.done, rng.randrange(1 << 30)
                    candidates = sample(w.mod, target, w.task, count, seed, w.traces)
                except Exception as e:  # noqa: BLE001 - TVM raises many kinds; the workload is left out, said why
                    w.broken = last_line(str(e), type(e).__name__)[:200]
                    print(f"  {w.task} ({w.workload_id}): left out: {w.broken}", flush=True)
                    continue
                if not candidates:
                    w.broken = "exhausted: its design spaces gave no new schedule"
                    continue
                results = measure(w, candidates, target, builder, measurer)
                records = [
                    RecordIn(
                        workload=w.ident,
                        device=device,
                        trace=trace,
                        run_secs=tuple(m.run_secs) if m.ok else (FAILED_RUN_SECS,),
                        source="tuned",
                        tool_version=hostinfo.tool_version(),
                        model=w.model,
                        host=hostinfo.hostname(),
                    )
                    for (_, trace), m in zip(candidates, results, strict=True)
                ]
                writer.write(records)
                w.done += len(records)
                measured += sum(m.ok for m in results)
                failed += sum(not m.ok for m in results)
                spent = time.monotonic() - start - import_s
                print(
                    f"  quota {quota}: {w.task} ({w.workload_id}) +{len(records)}; {measured} ok, {failed} failed "
                    f"in {spent:.0f} s = {(measured + failed) / max(spent, 1e-9):.2f} programs/s",
                    flush=True,
                )
            if stop:
                break
        builder.shutdown()
    spent = time.monotonic() - start
    summary = {
        "device": device.name,
        "workloads": len(workloads),
        "exhausted": sum(1 for w in workloads if w.broken and w.broken.startswith("exhausted")),
        "left_out": {
            f"{w.task} ({w.workload_id})": w.broken
            for w in workloads
            if w.broken and not w.broken.startswith("exhausted")
        },
        "stored_programs": sum(w.done for w in workloads),
        "this_run": {"ok": measured, "failed": failed, "seconds": round(spent), "import_s": round(import_s)},
        "rate_per_s": round((measured + failed) / max(spent - import_s, 1e-9), 2),
        "stopped": stop or "every workload at its quota",
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
