"""What fast math buys: each model tuned twice by ``registry tune`` (exact erf/exp/tanh/softmax with ``--exact-math``,
and the default approximations), then both builds and onnxruntime timed in one run, in turn.

    .venv/bin/python bench/fast_math.py [--trials 256] [--rounds 3] [NAME ...]    # corpus names (make corpus)

1. **Tune.** ``registry tune MODEL --trials N --no-predictor`` into a fresh registry per model and math
   (``--work``), as a user runs it; the JSON reports are kept. Same trial count for both, no predictor, so only the
   math differs.
2. **Time.** The untuned build (exact), the two tuned builds and onnxruntime (1 intra-, 1 inter-op thread), timed in
   turn ``--rounds`` times (each a median of 7 samples of at least 50 ms), medians and spreads; TVM's builds in the
   registry's measurement worker, on the same inputs as onnxruntime.
3. **Accuracy.** Each tuned build's output against onnxruntime's on one input: the largest absolute difference.

Writes bench/results/fast_math.json (with the machine, the commit and the date) and prints the table of
docs/BENCHMARKS.md ("Fast math").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.corpus.run import registry, shape_args  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402

MODELS = ["bert-l2-h128", "gpu-vit-l2-h128", "resnet-basic-w32"]  # a text transformer, a vision one, a CNN
MATHS = {"exact": ["--exact-math"], "fast": []}


def tune(name: str, math: str, trials: int, work: Path) -> dict:
    db, report = work / f"{name}-{math}.db", work / f"{name}-{math}.json"
    if report.exists():  # finished before: resume
        return json.loads(report.read_text())
    db.unlink(missing_ok=True)
    model = BY_NAME[name]
    start = time.perf_counter()
    args = ["tune", str(materialize(model)), *shape_args(model), *MATHS[math], "--trials", str(trials)]
    result, error = registry(*args, "--no-predictor", "--json", db=db)
    if result is None:
        raise SystemExit(f"{name} ({math}): {error}")
    result["wall_s"] = time.perf_counter() - start
    report.write_text(json.dumps(result))
    print(f"{name} {math}: tuned in {result['wall_s']:.0f} s, {result['final_ms']:.3f} ms", flush=True)
    return result


def time_builds(name: str, work: Path, rounds: int) -> dict:
    import numpy as np
    import onnx
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from bench.corpus.ort_reference import session, timed_with_onnxruntime
    from registry.measure.measurer import Measurer
    from registry.records.database import RegistryDatabase
    from registry.store.factory import open_storage
    from registry.tvm_side import onnx_prep
    from registry.tvm_side.compile import compile_model
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.onnx_inputs import input_specs, make_inputs
    from registry.tvm_side.target import host_target

    model, target = BY_NAME[name], host_target()
    path = materialize(model)
    exact = load_onnx(path, model.shapes, name=name)
    with Measurer(target) as measurer:
        built = {"untuned": compile_model(ms.database.MemoryDatabase(), exact.mod, target, exact_math=True)}
        for math in ("exact", "fast"):
            db = RegistryDatabase(
                target, open_storage(f"sqlite:///{work / f'{name}-{math}.db'}"), device=measurer.device
            )
            built[math] = compile_model(db, exact.mod, target, exact_math=math == "exact")
        samples = timed_with_onnxruntime(measurer, built, exact.inputs, path, model.shapes, rounds)
    onnx_model = onnx.load(str(path))
    feeds = make_inputs(input_specs(onnx_model, onnx_prep.fixed_input_shapes(onnx_model, model.shapes)), 0)
    want = session(path, 1, 1).run(None, feeds)[0]
    diffs = {}
    for math in MATHS:
        vm = relax.VirtualMachine(built[math], tvm.cpu())
        out = vm["main"](*[tvm.runtime.tensor(feeds[i.name]) for i in exact.inputs])
        got = (out if hasattr(out, "numpy") else out[0]).numpy()
        diffs[math] = float(np.abs(got - want).max())
    return {
        "ms": {k: sorted(v)[len(v) // 2] for k, v in samples.items() if v},
        "spread": {k: [min(v), max(v)] for k, v in samples.items() if v},
        "max_abs_diff_vs_onnxruntime": diffs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=MODELS)
    parser.add_argument("--trials", type=int, default=256, help="registry tune --trials, the same for both maths")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "fast_math")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fast_math.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.names:
        reports = {math: tune(name, math, args.trials, args.work) for math in MATHS}
        row = {"model": name, "trials": args.trials, **time_builds(name, args.work, args.rounds)}
        row["tune_wall_s"] = {m: round(r["wall_s"], 1) for m, r in reports.items()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps(stamped({"rows": rows}), indent=1))
    print("| model | untuned ms | tuned, exact math | tuned, fast math | onnxruntime | fast / onnxruntime |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ms_ = r["ms"]
        print(f"| {r['model']} | {ms_['untuned']:.2f} | {ms_['exact']:.3f} | {ms_['fast']:.3f} | "
              f"{ms_['onnxruntime']:.3f} | {ms_['fast'] / ms_['onnxruntime']:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
