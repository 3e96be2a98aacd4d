"""Where the gap to onnxruntime comes from: per kind of operator, a tuned TVM model's time against onnxruntime's own
profile of the same model, and each runtime's time outside its kernels.

    .venv/bin/python bench/tuning/gap.py --models gpu-vit-l2-h128 resnet-basic-w32 \
        [--db-pattern bench/work/plateau/registry-budget-{model}.db] [--out bench/results/gap.json]

For each model and the registry that tuned it (by default the one ``bench/tuning/converge.py --trials 2000`` left):

- **TVM, per task.** Each task's schedule as compiling applies it (the registry's record, else the default) is timed
  on its own by the measurement workers (``Measurer.kernels``, precise settings), times the calls the model makes.
  Its kind comes from the task's name (``conv``, ``matmul``, ``layer norm``, ``softmax``, ``pool``, ``layout``: only
  reshapes, transposes, concatenations and the like; ``injective``: the rest).
- **onnxruntime, per node.** ``SessionOptions.enable_profiling`` over ``--runs`` calls after a warm-up: each node's
  kernel time, summed per operator type and mapped to the same kinds (``attention`` where onnxruntime fused one).
- **Outside the kernels.** The model's end-to-end median (TVM's build and onnxruntime timed in turn, unprofiled)
  minus the sum of its kernels: the VM's (or onnxruntime's) overhead per call, plus whatever a kernel costs more inside
  the model than alone (cold caches between kernels).

Writes bench/results/gap.json (machine, commit, date) and prints one table per model for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402

KINDS = ("conv", "matmul", "attention", "layer norm", "softmax", "pool", "injective", "layout")

# TVM's fused function names join the Relax operators they hold: fused_matmul3_add3_divide_fast_erf_add4_multiply2.
_TVM_WORDS = (
    ("conv", ("conv",)),
    ("matmul", ("matmul", "dense")),
    ("layer norm", ("layer_norm", "rms_norm")),
    ("softmax", ("softmax",)),
    ("pool", ("pool",)),
)
_LAYOUT_OPS = {
    "reshape", "transpose", "concatenate", "layout_transform", "squeeze", "expand_dims", "strided_slice", "take",
    "flatten", "permute_dims", "split", "broadcast_to",
}  # fmt: skip
_ORT_KINDS = {
    "conv": {"Conv", "FusedConv", "ConvTranspose", "NhwcFusedConv", "QLinearConv"},
    "matmul": {"MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulInteger", "MatMulNBits"},
    "attention": {"Attention", "MultiHeadAttention"},
    "layer norm": {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization"},
    "softmax": {"Softmax"},
    "pool": {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"},
    "layout": {
        "Transpose", "Reshape", "Concat", "Gather", "Slice", "Squeeze", "Unsqueeze", "Flatten", "ReorderInput",
        "ReorderOutput", "Split", "Expand", "Shape",
    },
}  # fmt: skip


def tvm_kind(task_name: str) -> str:
    for kind, words in _TVM_WORDS:
        if any(w in task_name for w in words):
            return kind
    rest = re.sub(r"\d+", "", task_name.removeprefix("fused_"))
    for op in sorted(_LAYOUT_OPS, key=len, reverse=True):  # longest first: "transpose" before "split"
        rest = rest.replace(op, "")
    return "layout" if not rest.strip("_") else "injective"


def ort_kind(op_type: str) -> str:
    return next((kind for kind, ops in _ORT_KINDS.items() if op_type in ops), "injective")


def applied_schedules(name: str, db: Path, target) -> dict:
    """The model's tasks as compiling with ``db`` meets them, each with a measurement job of the schedule compiling
    applies (the registry's record, else the default), and the database that compiles it."""
    from bench.tuning.run import load
    from registry.measure.jobs import module_job
    from registry.pipeline.model_run import extract
    from registry.records.database import RegistryDatabase
    from registry.store.sql.store import Store
    from registry.tvm_side.defaults import default_schedule
    from registry.tvm_side.target import runtime_threads

    store = Store(f"sqlite:///{db}")
    loaded = load(name)
    tasks = extract(store, loaded, target)
    database = RegistryDatabase(target, store, num_threads=runtime_threads())
    jobs, applied = [], []
    for t in tasks:
        sch = database.query_schedule(t.mod, target, workload_name="main")
        applied.append(sch is not None)
        jobs.append(module_job(sch.mod if sch is not None else default_schedule(t.mod, target), target, t.arguments))
    return {"tasks": tasks, "jobs": jobs, "applied": applied, "database": database, "loaded": loaded}


def tvm_side(name: str, db: Path, target, measurer, task_kind=None) -> dict:
    """Per task: name, kind (``task_kind(task)``, by default from its name), calls and the applied schedule's median
    µs alone."""

    from registry.tvm_side.compile import compile_model

    task_kind = task_kind or (lambda t: tvm_kind(t.name))
    side = applied_schedules(name, db, target)
    timings = measurer.kernels(side["jobs"])
    rows = [
        {"task": t.name, "kind": task_kind(t), "calls": t.weight, "us": m.median_s * 1e6, "record": a}
        for t, m, a in zip(side["tasks"], timings, side["applied"], strict=True)
    ]
    exe = compile_model(side["database"], side["loaded"].mod, target)
    return {"tasks": rows, "exe": exe, "inputs": side["loaded"].inputs}


def ort_profile(path: Path, shapes: dict, runs: int, node_kind=None) -> dict:
    """Per operator type: kernel µs per model call and nodes, from onnxruntime's own profiler. ``node_kind(op_type,
    node_name)`` splits them finer (bench/cnn_bench.py: convolutions by kernel size, stride and groups): the result's
    keys are then ``"OpType (kind)"``."""
    import onnx

    from bench.corpus.ort_reference import session
    from registry.tvm_side import onnx_prep
    from registry.tvm_side.onnx_inputs import input_specs, make_inputs

    model = onnx.load(str(path))
    feeds = make_inputs(input_specs(model, onnx_prep.fixed_input_shapes(model, shapes)), 0)
    with tempfile.TemporaryDirectory() as tmp:
        sess = session(path, profile_prefix=str(Path(tmp) / "ort"))
        for _ in range(20 + runs):  # 20 to warm up (the first calls allocate); their events are left out below
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    model_runs = sorted((e["ts"], e["dur"]) for e in events if e.get("cat") == "Session" and e["name"] == "model_run")
    starts = [ts for ts, _ in model_runs[-runs:]]
    # per operator type and call, the sum of its nodes' kernel times; then the median over the calls, for a call
    # the machine interrupted would pull a mean far off (a 2 ms model once summed 2.8 ms of convolutions on average)
    per_call: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(starts))
    nodes: dict[str, set] = defaultdict(set)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= starts[0]:
            op = e.get("args", {}).get("op_name", "?")
            if node_kind is not None:
                op = f"{op} ({node_kind(op, e['name'].removesuffix('_kernel_time'))})"
            per_call[op][bisect.bisect_right(starts, e["ts"]) - 1] += e["dur"]
            nodes[op].add(e["name"])
    return {
        "profiled_model_run_us": statistics.median(d for _, d in model_runs[-runs:]),
        "ops": {
            op: {"us": statistics.median(us), "nodes": len(nodes[op]), "kind": _kind_in(op)}
            for op, us in per_call.items()
        },
    }


def _kind_in(op: str) -> str:
    """The kind of a profile key: "Conv (conv 1x1)" names its own, a bare operator type is mapped."""
    found = re.fullmatch(r".* \((.+)\)", op)
    return found.group(1) if found else ort_kind(op)


def output_error(exe, path: Path, shapes: dict) -> dict:
    """The largest absolute difference between ``exe``'s first output and onnxruntime's, on the seeded inputs, and
    the largest magnitude in onnxruntime's (a detector's box coordinates reach its input's size: float32 rounds
    320 to 3e-5)."""
    import numpy as np
    import onnx
    import tvm
    from tvm import relax

    from bench.corpus.ort_reference import session
    from registry.tvm_side import onnx_prep
    from registry.tvm_side.onnx_inputs import input_specs, make_inputs

    model = onnx.load(str(path))
    feeds = make_inputs(input_specs(model, onnx_prep.fixed_input_shapes(model, shapes)), 0)
    want = session(path).run(None, feeds)[0]
    names = [i.name for i in model.graph.input if i.name in feeds]
    out = relax.VirtualMachine(exe, tvm.cpu())["main"](*[tvm.runtime.tensor(feeds[n]) for n in names])
    got = (out if hasattr(out, "numpy") else out[0]).numpy()
    return {"max_abs_error": float(np.abs(got - want).max()), "max_abs_output": float(np.abs(want).max())}


def compare(name: str, db: Path, target, runs: int, task_kind=None, node_kind=None) -> dict:
    """``name``'s tuned model (``db``'s records) against onnxruntime: end to end in one run, per kind of operator
    (``task_kind``, ``node_kind``: see ``tvm_side``, ``ort_profile``), and the outputs' largest difference."""
    from bench.corpus.ort_reference import timed_with_onnxruntime
    from registry.measure.measurer import Measurer

    model = BY_NAME[name]
    path = materialize(model)
    with Measurer(target) as measurer:
        tvm = tvm_side(name, db, target, measurer, task_kind)
        samples = timed_with_onnxruntime(measurer, {"tvm": tvm["exe"]}, tvm["inputs"], path, model.shapes, rounds=3)
    ort = ort_profile(path, model.shapes, runs, node_kind)
    e2e = {k: statistics.median(v) * 1e3 for k, v in samples.items() if v}  # µs
    kinds = dict.fromkeys([*KINDS, *(t["kind"] for t in tvm["tasks"]), *(o["kind"] for o in ort["ops"].values())])
    by_kind = {k: {"tvm_us": 0.0, "ort_us": 0.0, "tvm_tasks": [], "ort_ops": []} for k in kinds}
    for t in tvm["tasks"]:
        by_kind[t["kind"]]["tvm_us"] += t["us"] * t["calls"]
        by_kind[t["kind"]]["tvm_tasks"].append(t["task"])
    for op, o in ort["ops"].items():
        by_kind[o["kind"]]["ort_us"] += o["us"]
        by_kind[o["kind"]]["ort_ops"].append(op)
    tvm_kernels = sum(t["us"] * t["calls"] for t in tvm["tasks"])
    ort_kernels = sum(o["us"] for o in ort["ops"].values())
    return {
        "model": name,
        "db": str(db),
        "e2e_us": e2e,
        "e2e_spread_us": {k: [min(v) * 1e3, max(v) * 1e3] for k, v in samples.items() if v},
        "kernels_us": {"tvm": tvm_kernels, "onnxruntime": ort_kernels},
        "outside_kernels_us": {"tvm": e2e["tvm"] - tvm_kernels, "onnxruntime": e2e["onnxruntime"] - ort_kernels},
        "by_kind": {k: v for k, v in by_kind.items() if v["tvm_us"] or v["ort_us"]},
        "tvm_tasks": tvm["tasks"],
        "ort_ops": ort["ops"],
        "ort_profiled_model_run_us": ort["profiled_model_run_us"],
        **output_error(tvm["exe"], path, model.shapes),
    }


def table(r: dict) -> str:
    lines = [
        f"**{r['model']}**: end to end TVM {r['e2e_us']['tvm']:.0f} µs, onnxruntime {r['e2e_us']['onnxruntime']:.0f} "
        f"µs ({r['e2e_us']['tvm'] / r['e2e_us']['onnxruntime']:.2f}x)",
        "",
        "| kind | TVM µs per call | onnxruntime µs per call | TVM - onnxruntime | TVM tasks | onnxruntime operators |",
        "|---|---|---|---|---|---|",
    ]
    rows = sorted(r["by_kind"].items(), key=lambda kv: -(kv[1]["tvm_us"] - kv[1]["ort_us"]))
    for kind, v in rows:
        lines.append(
            f"| {kind} | {v['tvm_us']:.0f} | {v['ort_us']:.0f} | {v['tvm_us'] - v['ort_us']:+.0f} "
            f"| {len(v['tvm_tasks'])} | {', '.join(sorted(v['ort_ops']))} |"
        )
    o, k = r["outside_kernels_us"], r["kernels_us"]
    lines.append(
        f"| (all kernels) | {k['tvm']:.0f} | {k['onnxruntime']:.0f} | {k['tvm'] - k['onnxruntime']:+.0f} | | |"
    )
    lines.append(
        f"| outside kernels | {o['tvm']:.0f} | {o['onnxruntime']:.0f} | {o['tvm'] - o['onnxruntime']:+.0f} | | |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["gpu-vit-l2-h128", "resnet-basic-w32"])
    parser.add_argument("--db-pattern", default=str(ROOT / "bench/work/plateau/registry-budget-{model}.db"))
    parser.add_argument("--runs", type=int, default=200, help="profiled onnxruntime calls")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gap.json")
    args = parser.parse_args()

    from registry.tvm_side.target import host_target

    target = host_target()
    results = []
    for name in args.models:
        db = Path(args.db_pattern.format(model=name))
        if not db.exists():
            raise SystemExit(f"{db}: no registry for {name}; run bench/tuning/converge.py first, or give --db-pattern")
        results.append(compare(name, db, target, args.runs))
        print(table(results[-1]), "\n", flush=True)
    args.out.write_text(json.dumps(stamped({"results": results}), indent=1))


if __name__ == "__main__":
    main()
