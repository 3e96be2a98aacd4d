"""The vectorizable sigmoid (registry/tvm_side/sigmoid.py) against TVM's libm one, on whole SiLU CNNs: one registry's
records, the model compiled both ways in one process, both and onnxruntime timed in turn in one run.

    .venv/bin/python bench/sigmoid_bench.py [--dbs bench/work/cnn/starter] [--rounds 5] [NAME ...]

Each model's records are those ``bench/cnn_bench.py`` tuned for it on this machine (``--dbs``: the folder of its
registries, NAME.db; run it first): a pulled bundle's records are another machine's, transfer donors only, and a
model compiled without records of this machine runs TVM's default schedules. The lowering is global to a process
once registered, so the libm build is compiled first, with the registry's module replaced by an empty one, then the
module is loaded and the second build compiled.
Writes bench/results/sigmoid.json (machine, commit, date).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Before anything imports registry.tvm_side.compile: TVM's own sigmoid rule for the first build.
sys.modules["registry.tvm_side.sigmoid"] = types.ModuleType("registry.tvm_side.sigmoid")

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402

MODELS = ["nudenet-yolov8n-320", "ddddocr-det", "ppocr-v4-det"]  # 3.4 M, 9.5 M and 50 K sigmoid elements


def register_vectorizable_sigmoid() -> None:
    spec = importlib.util.spec_from_file_location("vectorizable_sigmoid", ROOT / "registry/tvm_side/sigmoid.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def run(names: list[str], dbs: dict[str, Path], rounds: int) -> list[dict]:
    from bench.corpus.ort_reference import timed_with_onnxruntime
    from bench.tuning.gap import output_error
    from bench.tuning.run import load
    from registry.measure.measurer import Measurer
    from registry.records.database import RegistryDatabase
    from registry.store.sql.store import Store
    from registry.tvm_side.compile import compile_model
    from registry.tvm_side.target import host_target, runtime_threads

    target = host_target()
    loaded = {name: load(name) for name in names}
    threads = runtime_threads()
    databases = {n: RegistryDatabase(target, Store(f"sqlite:///{dbs[n]}"), num_threads=threads) for n in names}
    builds = {n: {"libm": compile_model(databases[n], loaded[n].mod, target)} for n in names}
    register_vectorizable_sigmoid()
    for n in names:
        builds[n]["vectorizable"] = compile_model(databases[n], loaded[n].mod, target)
    rows = []
    with Measurer(target) as measurer:
        for n in names:
            model = BY_NAME[n]
            path = materialize(model)
            samples = timed_with_onnxruntime(measurer, builds[n], loaded[n].inputs, path, model.shapes, rounds)
            ms = {k: statistics.median(v) for k, v in samples.items() if v}
            rows.append({
                "model": n,
                "db": str(dbs[n]),
                "ms": ms,
                "spread_ms": {k: [min(v), max(v)] for k, v in samples.items() if v},
                "ratio_to_onnxruntime": {k: ms[k] / ms["onnxruntime"] for k in builds[n] if k in ms},
                "max_abs_error": {k: output_error(exe, path, model.shapes) for k, exe in builds[n].items()},
            })  # fmt: skip
            r = rows[-1]
            times = ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items())
            errors = ", ".join(f"{k} {v['max_abs_error']:.1e}" for k, v in r["max_abs_error"].items())
            print(f"{n}: {times}; max abs error against onnxruntime: {errors}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=MODELS)
    parser.add_argument("--dbs", type=Path, default=ROOT / "bench" / "work" / "cnn" / "starter",
                        help="the folder of bench/cnn_bench.py's registries, one NAME.db a model")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sigmoid.json")
    args = parser.parse_args()
    dbs = {name: args.dbs / f"{name}.db" for name in args.names}
    missing = [str(db) for db in dbs.values() if not db.exists()]
    if missing:
        sys.exit(f"no registry tuned by bench/cnn_bench.py: {', '.join(missing)}")
    rows = run(args.names, dbs, args.rounds)
    args.out.write_text(json.dumps(stamped({"rounds": args.rounds, "models": rows}), indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
