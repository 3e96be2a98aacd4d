"""How fast TVM's code for a CNN's 1x1 convolutions can be: a hand-written matrix-product schedule against
onnxruntime's MLAS on the same convolution (issue 38, the 1x1 convolutions' gap).

    .venv/bin/python bench/gemm_schedule_bench.py [--model nudenet-yolov8n-320] [--tasks 6] [--out FILE]

A 1x1 convolution in channels-last (NHWC, stride 1) is a matrix product: (pixels x Ci) x (Ci x Co). After a budget's
tuning, YOLOv8n's 1x1 convolutions ran at 2.75x onnxruntime's (docs/BENCHMARKS.md). This asks whether the gap is
TVM's code or the search: each of the model's ``--tasks`` largest 1x1 convolution tasks (pixels x Ci x Co, from the
registry's own task extraction, so with the pipeline's layout and fused epilogue) is scheduled by hand the way GEMM
micro-kernels are written: a register tile of MI pixels x FI output channels (FI a multiple of the vector width),
the reduction over Ci split by KO, the epilogue (bias, SiLU) applied to the tile as it leaves the registers, and
MetaSchedule's postprocessors (weight layout rewrite, vectorization) as for any candidate. A small grid of (MI, FI,
KO), each checked against the unscheduled workload's outputs; the fastest is reported beside onnxruntime's time for
the same convolution and epilogue as a one-node ONNX model (1 thread), both timed in this process.

Writes bench/results/gemm_schedule.json (machine, commit, date) and prints a table for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402

# the tile's rows, its vectors' width, the reduction's split (None: all of Ci)
GRID = [(mi, fi, ko) for mi in (4, 5, 6, 7, 8) for fi in (4, 8, 16, 32) for ko in (64, 128, None)]


def one_by_one_tasks(name: str, count: int):
    """The model's 1x1 convolution tasks, largest (FLOPs x calls) first: (task, its ``MatrixProduct``, silu)."""
    from tvm.s_tir import meta_schedule as ms

    from registry import api
    from registry.tvm_side.gemm_schedules import matrix_product_shape

    model = BY_NAME[name]
    loaded = api.load_model(str(materialize(model)), model.shapes)
    target = api.host_target(1)
    tasks = []
    for task in ms.relax_integration.extract_tasks(api.task_module(loaded.mod, target), target):
        shape = matrix_product_shape(task.dispatched[0])
        if shape is not None:
            tasks.append((task, shape, "sigmoid" in task.task_name))
    tasks.sort(key=lambda t: -t[1].pixels * t[1].ci * t[1].co * t[0].weight)
    return tasks[:count], target


def timed_us(func, args, dev) -> float:
    evaluator = func.time_evaluator("main", dev, number=20, repeat=7, min_repeat_ms=20)
    return statistics.median(evaluator(*args).results) * 1e6


def tvm_best(task, shape, target) -> dict:
    import numpy as np
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from registry.tvm_side.gemm_schedules import matrix_product_schedule

    workload = task.dispatched[0]
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    initial = [
        rng.standard_normal([int(d) for d in a.shape]).astype("float32")
        for a in ArgInfo.from_prim_func(workload["main"])
    ]
    reference = [tvm.runtime.tensor(a.copy(), dev) for a in initial]
    tvm.compile(workload, target=target)(*reference)
    want = reference[-1].numpy()
    tried = []
    for mi, fi, ko in GRID:
        ko = ko or shape.ci
        row_extent, vector_extent = shape.extents(fi)
        if row_extent % mi or vector_extent % fi or shape.ci % ko:
            continue
        try:
            sch = matrix_product_schedule(workload, target, shape, mi, fi, ko)
        except tvm.TVMError:
            continue
        if sch is None:
            continue
        lib = tvm.compile(sch.mod, target=target).mod
        args = [tvm.runtime.tensor(a.copy(), dev) for a in initial]
        lib["main"](*args)
        error = float(np.abs(args[-1].numpy() - want).max())
        tried.append({"mi": mi, "fi": fi, "ko": ko, "us": timed_us(lib, args, dev), "max_abs_error": error})
    return {"tried": tried, "best": min((t for t in tried if t["max_abs_error"] < 1e-3), key=lambda t: t["us"])}


def onnxruntime_us(pixels: int, ci: int, co: int, silu: bool, h: int) -> float:
    """The same convolution (and SiLU) as a one-node ONNX model, onnxruntime on 1 thread, in this process."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((co, ci, 1, 1)).astype("float32") * 0.05, "w")
    b = numpy_helper.from_array(rng.standard_normal(co).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if silu else "y"])]
    if silu:
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    wide = pixels // h
    graph = helper.make_graph(
        nodes,
        "conv1x1",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ci, h, wide])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, co, h, wide])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = {"x": rng.standard_normal((1, ci, h, wide)).astype("float32")}
    for _ in range(20):
        session.run(None, feed)
    samples = []
    for _ in range(7):
        began, calls = time.perf_counter(), 0
        while time.perf_counter() - began < 0.05:
            session.run(None, feed)
            calls += 1
        samples.append((time.perf_counter() - began) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="nudenet-yolov8n-320")
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--out", default=str(ROOT / "bench/results/gemm_schedule.json"))
    args = parser.parse_args()
    tasks, target = one_by_one_tasks(args.model, args.tasks)
    rows = []
    for task, shape, silu in tasks:
        pixels, ci, co = shape.pixels, shape.ci, shape.co
        h = pixels // shape.width
        tvm_side = tvm_best(task, shape, target)
        ort_us = onnxruntime_us(pixels, ci, co, silu, h)
        best = tvm_side["best"]
        flops = 2 * pixels * ci * co
        row = {
            "task": task.task_name,
            "layout": shape.layout,
            "calls": task.weight,
            "pixels": pixels,
            "ci": ci,
            "co": co,
            "silu": silu,
            "hand_us": best["us"],
            "hand_tile": [best["mi"], best["fi"], best["ko"]],
            "onnxruntime_us": ort_us,
            "hand_gflops": flops / best["us"] / 1e3,
            "onnxruntime_gflops": flops / ort_us / 1e3,
            "tried": tvm_side["tried"],
        }
        rows.append(row)
        print(
            f"| {task.task_name} | {pixels} x {ci} x {co} | {best['us']:.0f} ({row['hand_gflops']:.0f}) | "
            f"{ort_us:.0f} ({row['onnxruntime_gflops']:.0f}) | {best['us'] / ort_us:.2f}x | {best['mi']}x{best['fi']}, "
            f"KO {best['ko']} |",
            flush=True,
        )
    Path(args.out).write_text(json.dumps(stamped({"model": args.model, "rows": rows}), indent=1))


if __name__ == "__main__":
    main()
