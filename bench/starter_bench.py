"""What the starter bundle gives on models outside it: a new registry's first `registry transfer`, with and without
`registry pull`.

    .venv/bin/python bench/starter_bench.py [--rounds 3]
    .venv/bin/python bench/starter_bench.py --bundle registry/share/bundles/starter.bundle \
        --corpus distilbert-l2-h128 ... --out bench/results/starter_corpus.json   # corpus models outside the bundle

The bundle holds the corpus's records (bench/corpus); by default the models here are the ones this project builds
in code (registry/tvm_side/zoo.py: a ResNet, a MobileNetV2, a BERT encoder, an MLP), none of them in the corpus;
``--corpus`` names corpus models instead (those whose records the bundle lacks, for a fair test), and ``--bundle``
imports a bundle file in place of ``registry pull`` (one not shipped yet). Per model:
`registry transfer --tune-trials 0` (``--tune-trials 32``: as a user's first transfer, tuning the tasks no donor
helped) into a registry that pulled the starter bundle (an empty registry has no donor:
its transfer compiles the untuned model), then the untuned build, the transferred build and onnxruntime are timed in
one process, interleaved, ``rounds`` times (medians), as bench/corpus/run.py times the corpus. Also: how long the
pull takes. Results: bench/results/starter.json, docs/BENCHMARKS.md ("The starter bundle: a new user's first transfer").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.corpus.ort_reference import timed_with_onnxruntime  # noqa: E402
from bench.corpus.run import registry as run_registry  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402
from bench.sqlite_copy import copy_sqlite  # noqa: E402
from registry.tvm_side import zoo  # noqa: E402

MODELS = {
    "zoo-resnet-64px": (lambda: zoo.resnet(), {"x": [1, 3, 64, 64]}),
    "zoo-mobilenetv2-64px": (lambda: zoo.mobilenet_v2(), {"x": [1, 3, 64, 64]}),
    "zoo-bert-l2-h128": (lambda: zoo.bert(), None),
    "zoo-mlp-32x96": (lambda: zoo.mlp(batch=32, sizes=(96, 192, 48)), {"x": [32, 96]}),
}


def registry(db: Path, *args: str) -> dict:
    report, error = run_registry(*args, "--json", db=db)
    if report is None:
        raise SystemExit(f"registry {' '.join(args)}: {error}")
    return report


def shapes_of(model: onnx.ModelProto, given) -> dict[str, list[int]]:
    if given is not None:
        return given
    init = {i.name for i in model.graph.initializer}
    return {
        i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input if i.name not in init
    }


def time_model(path: Path, shapes: dict, db: Path, rounds: int) -> dict:
    from tvm.s_tir import meta_schedule as ms

    from registry.measure.measurer import Measurer
    from registry.records.database import RegistryDatabase
    from registry.store.factory import open_storage
    from registry.tvm_side.compile import compile_model
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    target = host_target()
    with Measurer(target) as measurer:
        loaded = load_onnx(path, shapes, name=path.stem)  # compile_model rewrites it as the CLI did
        starter = RegistryDatabase(target, open_storage(f"sqlite:///{db}"), device=measurer.device)
        dbs = {"untuned": ms.database.MemoryDatabase(), "starter": starter}
        built = {k: compile_model(d, loaded.mod, target) for k, d in dbs.items()}
        tvm = timed_with_onnxruntime(measurer, built, loaded.inputs, path, shapes, rounds)
        ort = tvm.pop("onnxruntime")
    out = {k: statistics.median(v) if v else None for k, v in tvm.items()}
    out["onnxruntime"] = statistics.median(ort)
    return out


def models(corpus: list[str] | None, tmp: Path):
    """(name, ONNX file, input shapes) of the corpus models named, or of the zoo's."""
    if corpus:
        for name in corpus:
            yield name, materialize(BY_NAME[name]), BY_NAME[name].shapes
        return
    for name, (build, given) in MODELS.items():
        model = build()
        path = tmp / f"{name}.onnx"
        onnx.save_model(model, path)
        yield name, path, shapes_of(model, given)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bundle", type=Path, help="import this bundle file instead of `registry pull`")
    parser.add_argument("--corpus", nargs="+", choices=sorted(BY_NAME), metavar="NAME", help="corpus models instead")
    parser.add_argument(
        "--tune-trials",
        type=int,
        default=0,
        help="transfer's --tune-trials: 0 (default here) shows what the bundle alone gives; 32 is what a user's "
        "first `registry transfer` does",
    )
    parser.add_argument(
        "--retune-below",
        type=float,
        default=0.5,
        help="transfer's --retune-below: transferred tasks under this share of their donor's FLOP rate are tuned too "
        "(when --tune-trials is not 0); 0 tunes only the tasks no donor helped",
    )
    parser.add_argument(
        "--every-default",
        action="store_true",
        help="`registry transfer` with every default, as a new user runs it (--tune-trials and --retune-below are then "
        "not passed; the default time budget of transfer's tuning applies)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "starter.json")
    args = parser.parse_args()
    results: dict = {"models": {}, "bundle": str(args.bundle or "registry pull"), "tune_trials": args.tune_trials,
                     "retune_below": args.retune_below, "every_default": args.every_default}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "starter.db"
        start = time.perf_counter()
        pulled = registry(base, "import", str(args.bundle)) if args.bundle else registry(base, "pull")
        results["pull_s"], results["pulled_records"] = time.perf_counter() - start, pulled["records_new"]
        print(f"pull: {pulled['records_new']} records in {results['pull_s']:.0f} s", flush=True)
        for name, path, shapes in models(args.corpus, Path(tmp)):
            db = Path(tmp) / f"{name}.db"
            copy_sqlite(base, db)
            shape_args = [a for k, v in shapes.items() for a in ("--input-shape", f"{k}={','.join(map(str, v))}")]
            start = time.perf_counter()
            chosen = [] if args.every_default else ["--tune-trials", str(args.tune_trials), "--retune-below",
                                                    str(args.retune_below)]  # fmt: skip
            report = registry(db, "transfer", str(path), *shape_args, *chosen)
            tasks = report["tasks"]
            row = {"tasks": len(tasks), "sources": report["sources"],
                   "transferred": report["sources"].get("transferred", 0), "search_s": report["search_s"],
                   "transfer_wall_s": time.perf_counter() - start,
                   "ms": time_model(path, shapes, db, args.rounds),
                   # per task: where its schedule came from, its latency, its share of its donor's rate, its
                   # tuning and why that stopped (or why the task was not tuned)
                   "task_detail": [{k: t.get(k) for k in ("name", "weight", "source", "after_us", "of_donor_rate",
                                                          "trials", "stopped")} for t in tasks]}  # fmt: skip
            results["models"][name] = row
            print(name, json.dumps(row), flush=True)
    args.out.write_text(json.dumps(stamped(results), indent=1) + "\n")


if __name__ == "__main__":
    main()
