"""The corpus benchmark: every real model untuned, after `registry transfer`, after `registry tune`, and onnxruntime.

    .venv/bin/python bench/corpus/run.py [--trials-per-task 8] [--min-trials 64] [--leave-out family|group] [NAME ...]
    .venv/bin/python bench/corpus/run.py --only --floor 32 --trials-per-task 36 --leave-out group \
        --work bench/work/corpus32 --out bench/results/corpus32.json NAME ...       # the 8-model subset run

With NAMEs, only those models are transferred and timed (every model is still tuned: the others are their donors,
or with ``--only`` the named ones are each other's), and the rows of the other models in ``--out`` are kept as they
are. Stopped at any point, the same command resumes: finished steps are skipped, an interrupted tune goes on.

1. **Tune.** Each model is tuned by ``registry tune --trials N`` (N = trials per task x its tasks, at least 64;
   ``--floor F``: every task of at least 1% of the model gets F measured trials first) into a registry of its own
   (``WORK/tune/MODEL.db``); a finished model is not tuned again, an interrupted one resumes.
2. **Transfer.** For each family (``--leave-out family``) or group of families (``--leave-out group``: text
   transformers, audio/vision transformers, CNNs, models from wheels), a registry gets the tuned records of every
   model outside it (``registry export`` of each model's registry, ``registry import`` into one), then ``registry
   transfer MODEL --tune-trials 0`` runs on each of its models against a fresh copy of it: transfer from operators
   it has never seen tuned.
3. **One run, four latencies.** Per model, the untuned build, the build with transfer's registry, the build with
   tune's registry and onnxruntime are timed in turn, ``--rounds`` times (each a median of 7 samples of at least
   50 ms), medians; TVM's builds run in the registry's measurement worker, onnxruntime in this process with 1
   intra- and 1 inter-op thread; both on the same inputs (``registry.tvm_side.onnx_inputs``).

A model that does not import is a row with its one-line reason. Every command's JSON report is kept under
``WORK/reports``; the table goes to bench/results/corpus.json and is printed (docs/BENCHMARKS.md has it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import MODELS, CorpusModel, materialize  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402
from bench.sqlite_copy import copy_sqlite  # noqa: E402

REGISTRY = str(Path(sys.executable).with_name("registry"))
MIN_TRIALS = 64


def registry(*args: str, db: Path) -> tuple[dict | None, str]:
    """(the command's JSON report, or None with its error line)."""
    done = subprocess.run([REGISTRY, "--db", f"sqlite:///{db}", *args], capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return None, lines[-1] if lines else f"exit code {done.returncode}"
    out = done.stdout
    return (json.loads(out[out.index("{") :]) if "{" in out else {}), ""


def shape_args(model: CorpusModel) -> list[str]:
    return [a for s in model.shape_args for a in ("--input-shape", s)]


def task_count(model: CorpusModel) -> int | str:
    """The model's MetaSchedule tasks, or the one-line reason it does not import (a process of its own: TVM stays
    out of this one until the timing)."""
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); from bench.corpus.check_import import check; "
        "from bench.corpus.catalogue import BY_NAME; print(json.dumps(check(BY_NAME[sys.argv[2]], None)))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(ROOT), model.name], capture_output=True, text=True)
    if done.returncode != 0:
        return f"import check failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    row = json.loads(done.stdout.strip().splitlines()[-1])
    return row["tasks"] if row["ok"] else row["error"]


def tune_all(models: list[CorpusModel], work: Path, per_task: int, min_trials: int, floor: int, rows: dict) -> None:
    """``registry tune`` each model into its own registry. A finished model (its report kept) is skipped; an
    interrupted one resumes, since ``--trials`` counts the records its registry already holds."""
    for model in models:
        report_file = work / "reports" / f"tune-{model.name}.json"
        if report_file.exists():
            rows[model.name]["tune"] = json.loads(report_file.read_text())
            continue
        path, db = materialize(model), work / "tune" / f"{model.name}.db"
        tasks = task_count(model)
        if isinstance(tasks, str):
            rows[model.name]["error"] = tasks
            print(f"{model.name}: {tasks}", flush=True)
            continue
        trials = max(min_trials, per_task * tasks)
        resumed = db.exists()
        floor_args = ["--floor", str(floor)] if floor else []
        print(f"{model.name}: tuning {trials} trials over {tasks} tasks{' (resumed)' if resumed else ''}", flush=True)
        start = time.perf_counter()
        report, error = registry("tune", str(path), *shape_args(model), "--trials", str(trials), *floor_args,
                                 "--json", db=db)  # fmt: skip
        if report is None:
            rows[model.name]["error"] = f"tune: {error}"
            print(f"{model.name}: tune failed: {error}", flush=True)
            continue
        report["wall_s"] = time.perf_counter() - start
        report["resumed"] = resumed  # then trials and wall_s count this last run only
        report_file.write_text(json.dumps(report, indent=1))
        rows[model.name]["tune"] = report
        print(f"{model.name}: tuned in {report['wall_s']:.0f} s", flush=True)


def floor_coverage(tune: dict, min_share: float = 0.01) -> dict | None:
    """Of the tasks carrying at least ``min_share`` of the tuned model's estimate (weight x the latency it runs
    with): how many, how many of them MetaSchedule ran out of distinct candidates for (a layout task may have one),
    and the fewest candidates one of the others had measured in the run."""
    tasks = [t for t in tune.get("tasks", []) if t.get("after_us") is not None]
    total = sum(t["weight"] * t["after_us"] for t in tasks)
    if not total:
        return None
    big = [t for t in tasks if t["weight"] * t["after_us"] >= min_share * total]
    searched = [t for t in big if "exhausted" not in (t.get("stopped") or "")]
    fewest = min(t["trials"] for t in searched) if searched else None
    return {"tasks": len(big), "exhausted": len(big) - len(searched), "fewest_trials": fewest}


# --leave-out groups: the transfer registry of a model lacks its whole group of families, not only its own family
# (a stricter test, and 4 registries to build instead of 20, each by importing the other models' logs).
GROUPS = {
    "text-transformer": {"bert", "gpt2", "t5", "bart"},
    "audio-vision-transformer": {"whisper", "wav2vec2", "vit", "swin", "mobilevit", "segformer"},
    "cnn": {"resnet", "convnext", "mobilenet", "efficientnet", "regnet"},
    "wheel": {"ppocr", "magika", "yolo", "ddddocr", "silero"},
}


def group_of(model: CorpusModel, leave_out: str) -> str:
    if leave_out == "family":
        return model.family
    return next(group for group, families in GROUPS.items() if model.family in families)


def transfer_all(
    models: list[CorpusModel], donors: list[CorpusModel], work: Path, rows: dict, leave_out: str = "family"
) -> None:
    """Transfer each of ``models`` from the tuned records of those ``donors`` outside its family or group."""
    families = sorted({group_of(m, leave_out) for m in models})
    tuned = [m for m in donors if (work / "tune" / f"{m.name}.db").exists() and "tune" in rows[m.name]]
    for family in families:
        members = [m for m in models if group_of(m, leave_out) == family and "error" not in rows[m.name]]
        if not members:
            continue
        template = work / "transfer" / f"without-{family}.db"
        if not template.exists():
            for other in tuned:
                if group_of(other, leave_out) == family:
                    continue
                logs = work / "logs" / other.name
                if not logs.exists():
                    registry("export", "-o", str(logs), db=work / "tune" / f"{other.name}.db")
                registry("import", str(logs), "--model", other.name, db=template)
        for model in members:
            report_file = work / "reports" / f"transfer-{model.name}.json"
            if report_file.exists():
                rows[model.name]["transfer"] = json.loads(report_file.read_text())
                continue
            db = work / "transfer" / f"{model.name}.db"
            copy_sqlite(template, db)
            report, error = registry(
                "transfer", str(materialize(model)), *shape_args(model), "--tune-trials", "0", "--json", db=db
            )
            if report is None:
                rows[model.name]["error"] = f"transfer: {error}"
                continue
            report_file.write_text(json.dumps(report, indent=1))
            rows[model.name]["transfer"] = report
            print(f"{model.name}: transfer {report['sources']} in {report['search_s']:.0f} s", flush=True)


def time_all(models: list[CorpusModel], work: Path, rounds: int, rows: dict) -> None:
    """Untuned, transfer and tune builds in the registry's measurer, and onnxruntime, interleaved per model."""
    from tvm.s_tir import meta_schedule as ms

    from bench.corpus.ort_reference import timed_with_onnxruntime
    from registry.measure.measurer import Measurer
    from registry.records.database import RegistryDatabase
    from registry.store.sql.store import Store
    from registry.tvm_side.compile import compile_model
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    target = host_target()
    with Measurer(target) as measurer:
        for model in models:
            row = rows[model.name]
            if "error" in row or "tune" not in row or "transfer" not in row:
                continue
            path = materialize(model)
            loaded = load_onnx(path, model.shapes, name=model.name)  # compile_model rewrites it as the CLI did
            exes = {"untuned": ms.database.MemoryDatabase()}
            for kind in ("transfer", "tune"):
                exes[kind] = RegistryDatabase(target, Store(f"sqlite:///{work / kind / f'{model.name}.db'}"),
                                              device=measurer.device)  # fmt: skip
            built = {k: compile_model(db, loaded.mod, target) for k, db in exes.items()}
            tvm = timed_with_onnxruntime(measurer, built, loaded.inputs, path, model.shapes, rounds)
            ort = tvm.pop("onnxruntime")
            row["ms"] = {k: sorted(v)[len(v) // 2] if v else None for k, v in tvm.items()}
            row["ms"]["onnxruntime"] = sorted(ort)[len(ort) // 2]
            row["spread"] = {k: [min(v), max(v)] if v else None for k, v in {**tvm, "onnxruntime": ort}.items()}
            print(f"{model.name}: {row['ms']}", flush=True)


def summary(models: list[CorpusModel], rows: dict) -> list[dict]:
    out = []
    for model in models:
        row = rows[model.name]
        tune, transfer = row.get("tune") or {}, row.get("transfer") or {}
        out.append(
            {
                "model": model.name,
                "family": model.family,
                "import": "ok" if "error" not in row else row["error"],
                "tasks": len(tune.get("tasks", [])) or None,
                "ms": row.get("ms"),
                "spread": row.get("spread"),
                "transferred": (transfer.get("sources") or {}).get("transferred"),
                "transfer_search_s": transfer.get("search_s"),
                "tune_trials": sum(t["trials"] for t in tune.get("tasks", [])) or None,
                "tune_measured": sum(t["measurements"] for t in tune.get("tasks", [])) or None,
                "tune_wall_s": tune.get("wall_s"),
                "tune_resumed": tune.get("resumed"),
                "floor": floor_coverage(tune),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", help="models to transfer and time (default: the whole corpus); the others' rows are kept"
    )
    parser.add_argument("--trials-per-task", type=int, default=8)
    parser.add_argument("--min-trials", type=int, default=MIN_TRIALS, help="trials for a model with few tasks")
    parser.add_argument(
        "--floor", type=int, default=0, help="`registry tune --floor`: measured trials every task of 1%% or more gets"
    )
    parser.add_argument(
        "--only",
        action="store_true",
        help="tune only the named models (the subset's registries are each other's donors), not the whole corpus",
    )
    parser.add_argument(
        "--leave-out",
        choices=("family", "group"),
        default="family",
        help="what a model's transfer registry lacks: its own family's records, or its whole group's (GROUPS)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "corpus")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "corpus.json")
    args = parser.parse_args()
    unknown = set(args.names) - {m.name for m in MODELS}
    if unknown:
        parser.error(f"not in the corpus: {', '.join(sorted(unknown))}")
    models = [m for m in MODELS if not args.names or m.name in args.names]
    for sub in ("tune", "transfer", "logs", "reports"):
        (args.work / sub).mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict] = {m.name: {} for m in MODELS}
    donors = models if args.only else MODELS
    tune_all(donors, args.work, args.trials_per_task, args.min_trials, args.floor, rows)
    transfer_all(models, donors, args.work, rows, args.leave_out)
    time_all(models, args.work, args.rounds, rows)
    table = summary(models, rows)
    if args.names and args.out.exists():  # keep the other models' rows, in the corpus's order
        kept = {r["model"]: r for r in json.loads(args.out.read_text())}
        kept.update({r["model"]: r for r in table})
        table = [kept[m.name] for m in MODELS if m.name in kept]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamped(table), indent=1) + "\n")
    print(f"\n{'model':26} {'family':10} {'tasks':>5} {'untuned':>9} {'transfer':>9} {'tune':>9} {'ort':>8}")
    for r in table:

        def cell(key: str, r=r) -> str:
            v = (r["ms"] or {}).get(key)
            return f"{v:9.3f}" if v is not None else f"{'-':>9}"

        if r["import"] != "ok":
            print(f"{r['model']:26} {r['family']:10} {r['import']}")
        else:
            print(f"{r['model']:26} {r['family']:10} {r['tasks'] or 0:5} {cell('untuned')} {cell('transfer')} "
                  f"{cell('tune')} {cell('onnxruntime'):>8}")  # fmt: skip


if __name__ == "__main__":
    main()
