"""Does MetaSchedule's layout rewrite close the convolutions' gap to onnxruntime? (issue #23, item 3)

    .venv/bin/python bench/tuning/layout_rewrite.py [--model resnet-basic-w32] [--trials 640] [--work DIR]

onnxruntime runs the ResNet's convolutions on MLAS's NCHWc kernels, whose weights are packed once, at session
start, into the order the kernel reads them. TVM's tuned convolutions read the weights in ONNX's OIHW order. The
layout rewrite is MetaSchedule's answer: a convolution or matmul whose weight is a constant is marked
layout-free (``AttachAttrLayoutFreeBuffers``), the ``RewriteLayout`` postprocessor lets each candidate choose the
weight's order after its tiling, and at compile time the weight's transform is split off
(``SplitLayoutRewritePreproc``) and folded into a constant (``FoldConstant``), so it costs nothing per call.

Both variants run plain ``tune_relax`` on the same model with the same trials, seed and builder, one after the other:

- ``plain``: the module as ``registry tune`` tunes it;
- ``rewrite``: the same, with layout-free weights, and the compile that folds their transforms;
- ``nhwc`` (``--variants``): ``rewrite`` after Relax's ``ConvertLayout`` made the convolutions channels-last (NHWC
  data, OHWI weights), the layout whose innermost dimension is a block of channels, as in MLAS's NCHWc.

Reports, per variant, the tuning time, the estimated latency (the sum over tasks of weight x best record) and its
parts per kind of task (``bench/tuning/gap.py``'s kinds), how many weight transforms are left in the compiled model
(0: all folded), and end to end times of both builds and onnxruntime, in turn, 3 rounds, medians. Writes
bench/results/layout_rewrite.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.machine_speed import stamped  # noqa: E402
from bench.tuning.run import PLAIN_BATCH, load  # noqa: E402

VARIANTS = ("plain", "rewrite", "nhwc")


def fused(mod, target):
    """The module after the passes that make MetaSchedule's tasks (``compile_relax``'s own first half)."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline

    passes = [
        *pipeline.library_dispatch_passes(target),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def variant_module(mod, target, variant: str):
    from tvm import relax

    if variant == "nhwc":  # channels last, as MLAS's NCHWc blocks them: a tile of channels is contiguous
        mod = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)
    mod = fused(mod, target)
    return relax.transform.AttachAttrLayoutFreeBuffers()(mod) if variant != "plain" else mod


def tune(mod, target, work: Path, trials: int) -> tuple[object, float]:
    """Plain tune_relax into a JSON database under ``work`` (reused when there)."""
    from tvm.s_tir import meta_schedule as ms

    from registry.measure.builder import PersistentBuilder
    from registry.tvm_side.compat import prepare_tuning

    work.mkdir(parents=True, exist_ok=True)
    seconds_file = work / "seconds.json"
    db = ms.database.JSONDatabase(work_dir=str(work))
    if seconds_file.exists():
        return db, json.loads(seconds_file.read_text())["seconds"]
    prepare_tuning(target.kind.name)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        ms.relax_integration.tune_relax(mod, {}, target, tmp, max_trials_global=trials,
                                        num_trials_per_iter=PLAIN_BATCH, database=db,
                                        builder=PersistentBuilder(), seed=1)  # fmt: skip
    seconds = time.perf_counter() - start
    seconds_file.write_text(json.dumps({"seconds": seconds}))
    return db, seconds


def estimate(mod, target, db) -> dict:
    """The model's estimated latency (µs) from ``db``'s best records, and its parts per kind of task."""
    from tvm.s_tir import meta_schedule as ms

    from bench.tuning.gap import tvm_kind

    total, tasks, by_kind = 0.0, 0, {}
    for task in ms.relax_integration.extract_tasks(mod, target):
        records = db.get_top_k(db.commit_workload(task.dispatched[0]), 1)
        if not records:
            continue
        us = task.weight * statistics.median(float(s) for s in records[0].run_secs) * 1e6
        total, tasks = total + us, tasks + 1
        kind = tvm_kind(task.task_name)
        by_kind[kind] = by_kind.get(kind, 0.0) + us
    return {"estimate_us": total, "by_kind_us": by_kind, "tasks_with_records": tasks}


def build(mod, target, db, variant: str):
    """The executable, and how many weight transforms it still runs per call: the split adds one call per rewritten
    weight, and folding removes each of them whose weight is a constant."""
    import tvm
    from tvm import relax

    from registry.tvm_side.compile import lowering_passes

    with target, db, tvm.transform.PassContext(opt_level=3):
        mod = relax.transform.MetaScheduleApplyDatabase()(mod)
        calls = _calls(mod)
        if variant != "plain":
            mod = relax.transform.SplitLayoutRewritePreproc()(mod)
            split = _calls(mod)
            mod = relax.transform.FoldConstant()(mod)
            print(f"  {split - calls} weight transforms split off, {_calls(mod) - calls} left", flush=True)
        left = _calls(mod) - calls
        exe = relax.build(mod, target=target, relax_pipeline=tvm.transform.Sequential(lowering_passes(target)))
    return exe, left


def _calls(mod) -> int:
    return mod["main"].script().count("R.call_tir(")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet-basic-w32")
    parser.add_argument("--trials", type=int, default=640)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "layout_rewrite")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS[:2]))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "layout_rewrite.json")
    args = parser.parse_args()

    from bench.corpus.catalogue import BY_NAME, materialize
    from bench.corpus.ort_reference import timed_with_onnxruntime
    from registry.measure.measurer import Measurer
    from registry.tvm_side.target import host_target

    target = host_target()
    loaded = load(args.model)
    result: dict = {"model": args.model, "trials": args.trials, "variants": {}}
    builds = {}
    for variant in args.variants:
        mod = variant_module(loaded.mod, target, variant)
        print(f"{variant}: tune_relax, {args.trials} trials", flush=True)
        db, seconds = tune(mod, target, args.work / f"{args.model}-{variant}", args.trials)
        builds[variant], transforms_left = build(mod, target, db, variant)
        result["variants"][variant] = {"tune_s": seconds, "transforms_left": transforms_left,
                                       **estimate(mod, target, db)}  # fmt: skip
        print(f"  {json.dumps(result['variants'][variant])}", flush=True)
    model = BY_NAME[args.model]
    with Measurer(target) as measurer:
        samples = timed_with_onnxruntime(measurer, builds, loaded.inputs, materialize(model), model.shapes, args.rounds)
    result["e2e_ms"] = {k: statistics.median(v) if v else None for k, v in samples.items()}
    result["e2e_samples_ms"] = samples
    print(json.dumps(result["e2e_ms"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamped(result), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
