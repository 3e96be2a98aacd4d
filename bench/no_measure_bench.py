"""One-shot compile (issue #37, item 5): `registry transfer --no-measure` against measured `registry transfer` on
held-out corpus models, the same registry, and the predictor's held-out quality per device.

    .venv/bin/python bench/no_measure_bench.py --registry R.db [R2.db ...]
        [--models roberta-l2-h256 resnet-bottleneck-w64] [--rounds 5] [--out bench/results/no_measure.json]
    .venv/bin/python bench/no_measure_bench.py --retime A.json B.json [--rounds 5] [--out OUT.json]

``R.db`` (several are merged with ``registry sync``) holds tuned records of other corpus models on this machine (and,
for the per-device table, on other devices): the siblings benchmark leaves such registries
(``bench/tuning/siblings.py``). For every device with records, ``registry predictor train`` (25% of the workloads
held out) reports the predictor's Spearman, top-5 recall and top-1 regret (how much slower its pick is than the best
measured schedule) against a random ranking. Then, for
each model, each on a copy of the registry:

- ``measured``: ``registry transfer M --tune-budget 0 -o measured.so``: the donors' schedules measured here and the
  fastest kept, nothing tuned (the same candidates the predictor chooses among; with its default budget, transfer
  would also tune the tasks no donor helped for up to 5 minutes; ``--every-default`` compares against that
  instead, `registry transfer M -o measured.so`, as a new user runs it);
- ``no-measure``: ``registry transfer M --no-measure -o predicted.so`` (the same 3 candidates a task);
- ``untuned``: the model without records; its command's wall time is the compile-only floor (import and compile,
  no search).

Each command's wall time is kept, and the libraries are timed in turn in one process by the registry's workers (TVM's
``time_evaluator``), ``--rounds`` times, medians; each library's output is compared with onnxruntime's on the same
seeded inputs (``bench.tuning.gap.output_error``). After `registry pull` (issue #53):
``--registry PULLED.db --every-default --no-predictor-quality --models distilbert-l2-h128 resnet-bottleneck-w64
ppocr-v5-det``. Writes the result with the machine, the commit and the date.
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
from bench.sqlite_copy import copy_sqlite  # noqa: E402

REGISTRY = str(Path(sys.executable).with_name("registry"))


def cli(db: Path, *args: str) -> tuple[dict, float]:
    start = time.perf_counter()
    done = subprocess.run([REGISTRY, "--db", f"sqlite:///{db}", *args, "--json"], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"registry {' '.join(args[:2])} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout[done.stdout.index("{") :]), seconds


def predictor_quality(db: Path) -> list[dict]:
    from registry.store.sql.store import Store

    store = Store(f"sqlite:///{db}")
    devices = [(d.id, d.name) for d in store.all_devices() if store.count_records(d.id)]
    store.close()
    out = []
    for device_id, name in devices:
        trained, seconds = cli(db, "predictor", "train", "--device", str(device_id))
        row = {"device": f"{device_id}:{name}", "train_s": seconds, "workloads": trained.get("workloads"),
               "records": trained.get("records")}  # fmt: skip
        for side in ("held_out", "random"):
            if side in trained:
                row[side] = {k: v for k, v in trained[side].items() if k != "per_workload"}
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def libraries(name: str, registry: Path, work: Path, every_default: bool = False, ranked: tuple = ()) -> dict:
    """``ranked``: a no-measure run more for each, with ``--candidates N`` (``no-measure-N``)."""
    model = BY_NAME[name]
    path, shapes = str(materialize(model)), shape_args(model)
    out = {}
    measured = [] if every_default else ["--tune-budget", "0"]
    kinds = [("measured", measured), ("no-measure", ["--no-measure"])]
    kinds += [(f"no-measure-{n}", ["--no-measure", "--candidates", str(n)]) for n in ranked]
    for kind, extra in kinds:
        db = work / f"{name}-{kind.replace(', ', '-').replace(' ', '-')}.db"
        copy_sqlite(registry, db)
        library = db.with_suffix(".so")
        report, seconds = cli(db, "transfer", path, *shapes, *extra, "-o", str(library))
        tuning = (report.get("tuning") or {}).get("summary")
        out[kind] = {"wall_s": seconds, "library": str(library), "sources": report["sources"], "tuning": tuning}
        print(f"{name} {kind}: {seconds:.1f} s, {report['sources']}", flush=True)
    return out


def timed(name: str, libs: dict, rounds: int) -> dict[str, float]:
    from registry.measure.measurer import Measurer
    from registry.measure.types import ModelJob
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    model = BY_NAME[name]
    loaded = load_onnx(materialize(model), model.shapes, name=name)
    jobs = {k: ModelJob(v["library"], tuple(loaded.inputs)) for k, v in libs.items()}
    samples: dict[str, list[float]] = {k: [] for k in jobs}
    with Measurer(host_target(), 1) as measurer:
        for _ in range(rounds):
            for k, job in jobs.items():
                m = measurer.model(job)
                if m.ok:
                    samples[k].append(m.median_s * 1e3)
    return {k: sorted(v)[len(v) // 2] for k, v in samples.items() if v}


def untuned_library(name: str, work: Path) -> dict:
    """The model compiled with no record (an empty registry): its library, and the wall time of that, the
    compile-only floor (import and compile, no search)."""
    model = BY_NAME[name]
    db = work / f"{name}-untuned.db"
    db.unlink(missing_ok=True)
    library = db.with_suffix(".so")
    path = str(materialize(model))
    _, seconds = cli(db, "transfer", path, *shape_args(model), "--tune-budget", "0", "-o", str(library))
    return {"library": str(library), "wall_s": seconds}


def output_errors(name: str, libs: dict) -> dict:
    """Each library's largest difference from onnxruntime's output on the seeded inputs (``bench.tuning.gap``)."""
    import tvm

    from bench.tuning.gap import output_error

    model = BY_NAME[name]
    return {k: output_error(tvm.runtime.load_module(v["library"]), materialize(model), model.shapes)
            for k, v in libs.items()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["roberta-l2-h256", "resnet-bottleneck-w64"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", type=Path, default=ROOT / "bench/work/no_measure")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/no_measure.json")
    ap.add_argument(
        "--every-default",
        action="store_true",
        help="measured: `registry transfer` with every default (its tuning too), not --tune-budget 0",
    )
    ap.add_argument(
        "--no-predictor-quality",
        action="store_true",
        help="skip training predictors on the registry's records (a pulled bundle holds one a task)",
    )
    ap.add_argument(
        "--retime",
        type=Path,
        nargs=2,
        metavar=("A.json", "B.json"),
        help="instead of a run: time the libraries of two earlier runs' results (two starter bundles, say) in turn in "
        "one process, model by model, and write each library's median and B's over A's",
    )
    ap.add_argument("--registry", type=Path, nargs="+", help="registries merged into one (sync)")
    ap.add_argument(
        "--ranked",
        type=int,
        nargs="+",
        default=[],
        help="also `--no-measure --candidates N` for each N (kind no-measure-N): a wider pool for the predictor",
    )
    args = ap.parse_args()
    if args.retime:
        retime(args.retime, args.rounds, args.out)
        return
    if not args.registry:
        ap.error("--registry is required (or --retime)")
    args.work.mkdir(parents=True, exist_ok=True)
    registry = args.work / "registry.db"
    copy_sqlite(args.registry[0], registry)
    for more in args.registry[1:]:
        done = subprocess.run([REGISTRY, "sync", f"sqlite:///{more}", f"sqlite:///{registry}"], capture_output=True)
        if done.returncode != 0:
            raise SystemExit(f"sync of {more} failed: {done.stderr.decode().strip().splitlines()[-1:]}")
    result: dict = {"registries": [p.name for p in args.registry], "models": [], "every_default": args.every_default}
    result["predictors"] = [] if args.no_predictor_quality else predictor_quality(registry)
    for name in args.models:
        try:
            libs = libraries(name, registry, args.work, args.every_default, tuple(args.ranked))
        except SystemExit as e:  # a model a door cannot compile: kept in the result, the others go on
            result["models"].append({"model": name, "error": str(e)})
            print(f"{name}: {e}", flush=True)
            continue
        libs["untuned"] = untuned_library(name, args.work)
        ms = timed(name, libs, args.rounds)
        row = {"model": name, "runs": libs, "e2e_ms": ms, "output_error": output_errors(name, libs)}
        if "no-measure" in ms and "measured" in ms:
            row["no_measure_vs_measured"] = ms["no-measure"] / ms["measured"]
            row["wall_ratio"] = libs["measured"]["wall_s"] / libs["no-measure"]["wall_s"]
            row["of_floor"] = libs["no-measure"]["wall_s"] / libs["untuned"]["wall_s"]
        for n in args.ranked:
            kind = f"no-measure-{n}"
            if kind in ms and "measured" in ms:
                wall = libs[kind]["wall_s"]
                row[kind] = {"vs_measured": ms[kind] / ms["measured"], "of_floor": wall / libs["untuned"]["wall_s"],
                             "wall_ratio": libs["measured"]["wall_s"] / wall}  # fmt: skip
        result["models"].append(row)
        print(json.dumps({k: row[k] for k in row if k != "runs"}), flush=True)
        args.out.write_text(json.dumps(stamped(result), indent=2))
    print(f"wrote {args.out}")


def retime(results: list[Path], rounds: int, out: Path) -> None:
    """Every library of two earlier results, timed in turn in one process, model by model (``timed``): the two runs'
    own timings were taken apart, minutes away on a shared machine."""
    runs = [{m["model"]: m for m in json.loads(p.read_text())["models"] if "runs" in m} for p in results]
    result: dict = {"retimed": [str(p) for p in results], "models": []}
    for name in [n for n in runs[0] if n in runs[1]]:
        libs = {f"{tag} {k}": v for tag, run in zip("AB", runs, strict=True) for k, v in run[name]["runs"].items()}
        ms = timed(name, libs, rounds)
        kinds = {k.split(" ", 1)[1] for k in ms}
        ratios = {k: ms[f"B {k}"] / ms[f"A {k}"] for k in sorted(kinds) if f"A {k}" in ms and f"B {k}" in ms}
        result["models"].append({"model": name, "e2e_ms": ms, "b_over_a": ratios})
        print(json.dumps(result["models"][-1]), flush=True)
        out.write_text(json.dumps(stamped(result), indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
