"""Convolutional networks against onnxruntime on this CPU (issue 38): `registry tune --budget` on detection and
mobile CNNs, end to end and per kind of operator, and the outputs' largest difference.

    .venv/bin/python bench/cnn_bench.py [--budget 10m] [--start empty|starter] [NAME ...]
    .venv/bin/python bench/cnn_bench.py --transfer --start starter ddddocr-det    # a first transfer instead

For each corpus model (make corpus), into a fresh registry (``--start starter``: one that pulled the starter bundle
first):
- ``registry tune MODEL --budget B --json`` (``--transfer``: ``registry transfer MODEL --json``, its defaults), as a
  user runs it: its wall time, trials and tasks;
- the tuned model and onnxruntime (1 thread, all graph optimizations) timed in turn in one run
  (``bench/tuning/gap.py``'s ``compare``), each kernel timed alone, and onnxruntime's own profile per node;
- time per kind, finer than gap.py's for convolutions: ``conv 1x1``, ``conv KxK`` (stride 1), ``conv strided``,
  ``depthwise`` (one input channel per group), their fused epilogues inside them, and ``concat``, ``resize``,
  ``pool``, ``layout`` (reorders, transposes, reshapes), ``elementwise`` (what is left);
- the largest absolute difference between the model's output and onnxruntime's on the same seeded inputs.

Writes bench/results/cnn-{start}.json (``cnn-transfer-{start}.json``; machine, commit, date) and prints a table per
model for docs/BENCHMARKS.md.
The tuning runs one after the other: each uses both cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.corpus.run import shape_args  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402
from bench.tuning import gap  # noqa: E402

# A YOLO (SiLU, concatenations, resizes), PaddleOCR's DB text detector (hard-swish, depthwise), a MobileNetV2 (ReLU6,
# depthwise), and a YOLOX-style detector at 416x416.
MODELS = ["nudenet-yolov8n-320", "ppocr-v4-det", "mobilenetv2-0.35", "ddddocr-det"]
REGISTRY = str(Path(sys.executable).with_name("registry"))


def tune(
    name: str, budget: str | None, start: str, work: Path, transfer_budget: str | None = None, predictor: bool = True
) -> dict:
    """``registry tune`` into a fresh registry (after ``registry pull`` for the starter), as a user runs it
    (``--no-predictor`` where ``predictor`` is False); with no budget, ``registry transfer`` (``--tune-budget
    transfer_budget`` where given)."""
    db, summary = work / f"{name}.db", work / f"{name}.tune.json"
    if summary.exists() and db.exists():  # tuned by an earlier run of this benchmark: measured again, not re-tuned
        return {**json.loads(summary.read_text()), "db": db}
    for stale in work.glob(f"{name}.db*"):
        stale.unlink()
    base = [REGISTRY, "--db", str(db)]
    if start == "starter":
        subprocess.run([*base, "pull"], check=True, stdout=subprocess.DEVNULL)
    model = BY_NAME[name]
    began = time.perf_counter()
    command = ["tune", "--budget", budget] if budget else ["transfer"]
    if not budget and transfer_budget:
        command += ["--tune-budget", transfer_budget]
    if budget and not predictor:
        command += ["--no-predictor"]
    out = subprocess.run(
        [*base, command[0], str(materialize(model)), *shape_args(model), *command[1:], "--json"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    report = json.loads(out.stdout)
    tuned = {
        "wall_s": time.perf_counter() - began,
        "trials": sum(t.get("trials") or 0 for t in report.get("tasks", [])),
        "tasks": len(report.get("tasks", [])),
        "report_ms": {k: report.get(k) for k in ("untuned_ms", "final_ms")},
        "sources": report.get("sources"),
        "timings": report.get("timings"),  # where the wall time went: import, donors, measure, report, compile
    }
    summary.write_text(json.dumps(tuned))
    return {**tuned, "db": db}


def task_kind(task) -> str:
    """A task's kind: convolutions by what their TIR computes, the rest by the operators in their name."""
    name = task.name
    if "conv2d_transpose" in name:
        return "conv transpose"
    if "conv" in name:
        return _conv_kind(task.mod)
    for word, kind in (("concatenate", "concat"), ("resize", "resize"), ("pool", "pool")):
        if word in name:
            return kind
    kind = gap.tvm_kind(name)
    return "elementwise" if kind == "injective" else kind


def _conv_kind(mod) -> str:
    """From the convolution block: its reduction extents (input channels per group, kernel height) and its output's
    height against its input's."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(mod)
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    conv = next((b for b in blocks if "conv" in b.name_hint), None)
    if conv is None:
        return "conv"
    extents = {v.var.name.removeprefix("v_"): int(v.dom.extent) for v in conv.iter_vars}
    nhwc = "nhwc" in conv.name_hint
    data = [int(d) for d in ArgInfo.from_prim_func(mod["main"])[0].shape]
    h_in = data[1] if nhwc else data[2]
    if extents.get("rc", 0) == 1 and extents.get("ff", 0) > 1:
        return "depthwise"
    if h_in >= 2 * extents.get("yy", h_in):
        return "conv strided"
    return "conv 1x1" if extents.get("ry", 1) == 1 else "conv KxK"


def node_kind_of(path: Path):
    """onnxruntime's nodes by kind, read from the graph its optimizer made (the one it profiles): its NCHWc
    convolutions ("com.microsoft.nchwc" Conv, fused with their activations) keep their kernel, stride and group
    attributes."""
    import tempfile

    import onnx

    from bench.corpus.ort_reference import session

    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        session(path, optimized_path=str(optimized))
        model = onnx.load(str(optimized))
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    convs = {}
    for node in model.graph.node:
        if node.op_type not in gap._ORT_KINDS["conv"]:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        shape = weights.get(node.input[1], [])
        kernel = list(attrs.get("kernel_shape") or shape[2:4] or [0])
        if node.op_type == "ConvTranspose":
            convs[node.name] = "conv transpose"
        elif attrs.get("group", 1) > 1:
            convs[node.name] = "depthwise"
        elif max(attrs.get("strides", [1])) > 1:
            convs[node.name] = "conv strided"
        else:
            convs[node.name] = "conv 1x1" if kernel and max(kernel) == 1 else "conv KxK"

    def node_kind(op_type: str, node_name: str) -> str:
        if op_type in gap._ORT_KINDS["conv"]:
            return convs.get(node_name, "conv")
        if op_type == "Concat":
            return "concat"
        if op_type in ("Resize", "Upsample"):
            return "resize"
        kind = gap.ort_kind(op_type)
        return "elementwise" if kind == "injective" else kind

    return node_kind


def table(row: dict) -> str:
    """A model's row as markdown: end to end, then per kind. onnxruntime's profiler adds a few µs to each of its
    nodes (its profiled run is 1.1-1.5x its plain one), so its column is also given scaled to its plain run."""
    r, tuned, e2e = row, row["tune"], row["e2e_us"]
    scale = e2e["onnxruntime"] / r["ort_profiled_model_run_us"]
    command = "tune --budget " + row["budget"] if row.get("budget") else "transfer"
    if row.get("tune_budget"):
        command += " --tune-budget " + row["tune_budget"]
    lines = [
        f"**{row['model']}** ({command}, from {row['start']}): {tuned['wall_s'] or 0:.0f} s, {tuned['trials']} "
        f"trials over {tuned['tasks']} tasks; TVM {e2e['tvm'] / 1e3:.2f} ms, onnxruntime {e2e['onnxruntime'] / 1e3:.2f}"
        f" ms (**{e2e['tvm'] / e2e['onnxruntime']:.2f}x**); max abs error {r['max_abs_error']:.1e} (outputs up to "
        f"{r.get('max_abs_output', float('nan')):.3g})",
        "",
        "| kind | TVM µs | onnxruntime µs (profiled) | onnxruntime µs (scaled to its plain run) | TVM tasks | "
        "onnxruntime operators |",
        "|---|---|---|---|---|---|",
    ]
    for kind, v in sorted(r["by_kind"].items(), key=lambda kv: -(kv[1]["tvm_us"] - kv[1]["ort_us"] * scale)):
        ops = sorted({o.split(" (")[0] for o in v["ort_ops"]})
        lines.append(
            f"| {kind} | {v['tvm_us']:.0f} | {v['ort_us']:.0f} | {v['ort_us'] * scale:.0f} | {len(v['tvm_tasks'])} "
            f"| {', '.join(ops)} |"
        )
    k = r["kernels_us"]
    lines.append(f"| (all kernels) | {k['tvm']:.0f} | {k['onnxruntime']:.0f} | {k['onnxruntime'] * scale:.0f} | | |")
    lines.append(f"| outside kernels | {r['outside_kernels_us']['tvm']:.0f} | | | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=MODELS)
    parser.add_argument("--budget", default="10m", help="registry tune --budget, per model")
    parser.add_argument("--start", choices=("empty", "starter"), default="empty")
    parser.add_argument("--transfer", action="store_true", help="registry transfer (its defaults) instead of tune")
    parser.add_argument("--tune-budget", help="with --transfer: registry transfer --tune-budget (default: its own)")
    parser.add_argument("--no-predictor", action="store_true", help="registry tune --no-predictor")
    parser.add_argument("--runs", type=int, default=100, help="profiled onnxruntime calls")
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "cnn")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tables", action="store_true", help="only print the tables of the results file")
    args = parser.parse_args()
    budget = None if args.transfer else args.budget
    kind = "transfer-" if args.transfer else ""
    out = args.out or ROOT / "bench" / "results" / f"cnn-{kind}{args.start}.json"
    work = args.work / f"{kind}{args.start}"
    work.mkdir(parents=True, exist_ok=True)

    from registry.tvm_side.target import host_target

    target = host_target()
    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    if args.tables:
        print("\n\n".join(table(r) for r in rows))
        return
    done = {r["model"] for r in rows if r.get("budget") == budget}
    for name in args.names:
        if name in done:
            continue
        tuned = tune(name, budget, args.start, work, args.tune_budget, predictor=not args.no_predictor)
        path = materialize(BY_NAME[name])
        r = gap.compare(name, tuned["db"], target, args.runs, task_kind, node_kind_of(path))
        tuned["db"] = str(tuned["db"].relative_to(ROOT) if tuned["db"].is_relative_to(ROOT) else tuned["db"])
        rows = [x for x in rows if x["model"] != name] + [
            {"model": name, "budget": budget, "start": args.start, "tune_budget": args.tune_budget, "tune": tuned, **r}
        ]
        out.write_text(json.dumps(stamped({"rows": rows}), indent=1))
        print(table(rows[-1]), "\n", flush=True)


if __name__ == "__main__":
    main()
