"""Where `transfer --no-measure` loses: every donor program it ranks for a model, measured here.

    .venv/bin/python bench/predictor/donor_oracle.py --registry PULLED.db [--candidates 32] \
        [--rounds 3] [--update] [--compare OTHER.db] [--out bench/results/donor_oracle.json] MODEL [MODEL ...]
    .venv/bin/python bench/predictor/donor_oracle.py --rejudge bench/results/donor_oracle.json

For each task of each model with no record on this machine's device (what `--no-measure` ranks donors for), the
programs the donors make of it, as `registry.pipeline.predicted` makes them (`DonorSchedules.distinct`: the donors'
stored programs, then re-samples of the two nearest donors' decisions, ``--candidates`` in all), each built and
timed here (the measurer's QUICK timing, ``--rounds`` times in turn, medians: one program's single timings moved
widely between runs, docs/BENCHMARKS.md), beside the device's predictor's score (or its class sibling's, as
`--no-measure` takes it). Then, per model, each selection rule's choice: the task-weighted sum of the chosen programs'
latencies over that of every task's fastest candidate (1.00: the best any rule could pick among them), and the mean
per-task top-1 score (fastest over chosen):

- ``predictor``: the predictor's pick among all of them (what `--no-measure` builds);
- ``predictor, stored only``: its pick among the donors' programs as stored, no re-sample;
- ``first``: the first in donor order (the nearest donor on this device, its best record);
- ``predictor, first 8``: its pick among the first 8 in donor order (the donors' stored programs come first);
- ``best of the first 3``: the fastest of the first 3 in donor order, which a measured transfer times
  (``MEASURED_CANDIDATES``; it also re-tunes, which this does not count);
- ``compared predictor`` (with ``--compare OTHER.db``): the pick of another registry's predictor for this device
  (one that pulled an earlier starter bundle, say), among the same programs and timings.

``--update``: whether the predictor learns to rank such programs from other models' (more data of the kind it ranks
here): for each model, the predictor updated as a tuning run updates it (``RankingModel.update``'s rounds and
parameters) on the other models' measured donor programs, then judged on this model's.

``--rejudge RESULT.json`` (repeatable, no models, nothing measured): every rule applied again to an earlier result's
measured programs, one line a model: a new rule is judged on the timings already taken.

The registries are copied first (``bench/work/donor_oracle/``): nothing is written to ``--registry`` or ``--compare``.
Writes the result with the machine, the commit and the date.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402
from bench.sqlite_copy import copy_sqlite  # noqa: E402

Candidate = dict  # one measured program: its donor, whether re-sampled, its score and latency
Rule = Callable[[list[Candidate]], Candidate]

RULES: dict[str, Rule] = {
    "predictor": lambda c: max(c, key=lambda r: r["score"]),
    "compared predictor": lambda c: max(c, key=lambda r: r["compared_score"]),
    "predictor, stored only": lambda c: max([r for r in c if not r["resampled"]] or c, key=lambda r: r["score"]),
    "predictor, first 8": lambda c: max(c[:8], key=lambda r: r["score"]),
    "first": lambda c: c[0],
    "best of the first 3": lambda c: min(c[:3], key=lambda r: r["us"]),
}


def measured_candidates(
    name: str, registry: Path, work: Path, count: int, timings: int, compared: Path | None = None
) -> tuple[list[dict], object]:
    """Each non-exact task of ``name`` with its donor programs, scored and timed (a program that fails to build or
    run is left out), and the predictor that scored them; with ``compared``, each also scored by that registry's
    predictor for this machine's device (``compared_score``)."""
    from tvm.target import Target

    from registry import hostinfo
    from registry.measure.jobs import module_job
    from registry.measure.measurer import Measurer
    from registry.measure.types import QUICK
    from registry.pipeline.donor_schedules import DonorSchedules
    from registry.pipeline.model_run import extract
    from registry.similarity.index import SimilarityIndex
    from registry.store.factory import open_storage
    from registry.tvm_side.compat import prepare_tuning
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.predictor import ranking_inputs
    from registry.tvm_side.ranker import program_scores
    from registry.tvm_side.signature import structural_hash
    from registry.tvm_side.target import device_spec, host_target

    model = BY_NAME[name]
    db = work / f"{name}.db"
    copy_sqlite(registry, db)
    storage = open_storage(f"sqlite:///{db}", create_new=False)
    # this machine's device, as `registry transfer --no-measure` files it (added when the registry has none)
    device = device_spec(host_target(), hostinfo.env_threads())
    device_id = storage.add_device(device)
    target = Target(device.target)
    tasks = extract(storage, load_onnx(materialize(model), model.shapes, name=name), target)
    found = _ranking_predictor(storage, device_id, registry)
    other = None
    if compared is not None:
        copy_sqlite(compared, work / f"{name}-compared.db")  # the device is added to a copy, as to ``registry``'s
        other_storage = open_storage(f"sqlite:///{work / f'{name}-compared.db'}", create_new=False)
        other = _ranking_predictor(other_storage, other_storage.add_device(device), compared).model
    prepare_tuning(target.kind.name)
    index = SimilarityIndex(storage)
    index.load()
    schedules = DonorSchedules(storage, target)
    out = []
    with Measurer(target, device.num_threads) as measurer:
        for task in tasks:
            if storage.top_k(task.workload_id, device_id, 1):
                continue
            donors = schedules.find(index, task, device_id, 8)
            stored = {structural_hash(s.mod) for _, s in schedules.distinct(task.mod, donors, count, resample=0)}
            picked = schedules.distinct(task.mod, donors, count, resample=count)
            if not picked:
                continue
            # the features once: what the predictor scores (as its predict does) and what --update trains on
            blocks = found.model.features(*ranking_inputs(task.mod, target, task.name, [s for _, s in picked]))
            scores = program_scores(found.model.booster, blocks, found.model.device)
            compared_scores = (
                program_scores(other.booster, blocks, other.device) if other is not None else [None] * len(scores)
            )
            jobs = [module_job(s.mod, target, task.arguments) for _, s in picked]
            rounds = [measurer.kernels(jobs, QUICK) for _ in range(timings)]  # each program's median over rounds
            timed = [_median(list(samples)) for samples in zip(*rounds, strict=True)]
            candidates = [
                {
                    "donor": f"{d.task_name}#{d.workload_id}",
                    "same_device": d.same_device,
                    "resampled": structural_hash(s.mod) not in stored,
                    "score": round(float(score), 4),
                    **({"compared_score": round(float(other_score), 4)} if other_score is not None else {}),
                    "us": round(m * 1e6, 2),
                    "features": b,
                }
                for (d, s), score, other_score, m, b in zip(picked, scores, compared_scores, timed, blocks, strict=True)
                if m is not None
            ]
            if candidates:
                out.append({"task": task.name, "weight": task.weight, "candidates": candidates})
            print(f"{name} {task.name}: {len(candidates)} of {len(picked)} timed", flush=True)
    return [{"predictor_version": found.version, "predictor_from": found.sibling, "tasks": out}], found.model


def _ranking_predictor(storage, device_id: int, registry: Path):
    """The ranking predictor ``--no-measure`` takes for ``device_id`` (its own or its class sibling's)."""
    from registry.tvm_side.predictor import predictor_for
    from registry.tvm_side.ranker import RankingModel

    found = predictor_for(storage, device_id)
    if found is None or not isinstance(found.model, RankingModel):
        raise SystemExit(f"{registry}: no ranking predictor for this machine's device, nor a sibling's (registry pull)")
    return found


def _median(measurements: list) -> float | None:
    """The median over rounds of a program's mean seconds, None when it failed in any (a program that does not build
    or run is no candidate)."""
    if not all(m.ok for m in measurements):
        return None
    return statistics.median(statistics.fmean(m.run_secs) for m in measurements)


def summary(tasks: list[dict]) -> dict[str, dict[str, float]]:
    """Each rule's weighted latency over the fastest candidates', and its mean per-task top-1 score (none without
    tasks)."""
    if not tasks:
        return {}
    best = sum(t["weight"] * min(c["us"] for c in t["candidates"]) for t in tasks)
    out = {}
    compared = all("compared_score" in c for t in tasks for c in t["candidates"])
    for rule_name, rule in RULES.items():
        if rule_name == "compared predictor" and not compared:
            continue
        chosen = [(t, rule(t["candidates"])) for t in tasks]
        out[rule_name] = {
            "of_best": round(sum(t["weight"] * c["us"] for t, c in chosen) / best, 3),
            "top1": round(statistics.fmean(min(x["us"] for x in t["candidates"]) / c["us"] for t, c in chosen), 3),
        }
    return out


def updated(model, runs: list[dict]) -> dict[str, dict[str, float]]:
    """For each model of ``runs``: the predictor's pick before and after an update on the other models' measured
    donor programs (leave one model out), as ``summary`` gives it."""
    import numpy as np

    from registry.tvm_side.ranker import UPDATE_PARAMS, UPDATE_ROUNDS, fit, program_scores

    def rows(task: dict) -> list:
        return [c["features"] for c in task["candidates"]]

    out = {}
    for held in runs:
        others = [t for run in runs if run is not held for t in run["tasks"] if len(t["candidates"]) >= 2]
        if not others or not held["tasks"]:
            continue
        groups = [(rows(t), np.array([c["us"] * 1e-6 for c in t["candidates"]]), model.device) for t in others]
        booster = fit(groups, UPDATE_ROUNDS, base=model.base, params=UPDATE_PARAMS, nthread=2)
        rescored = []
        for t in held["tasks"]:
            scores = program_scores(booster, rows(t), model.device)
            candidates = [{**c, "score": float(v)} for c, v in zip(t["candidates"], scores, strict=True)]
            rescored.append({**t, "candidates": candidates})
        out[held["model"]] = {"before": summary(held["tasks"])["predictor"], "after": summary(rescored)["predictor"]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="corpus model names")
    ap.add_argument("--registry", type=Path, help="a registry after `registry pull`, say")
    ap.add_argument("--rejudge", type=Path, action="append", default=[], help="an earlier result: its rules again")
    ap.add_argument("--candidates", type=int, default=32, help="donor programs per task (--no-measure's default)")
    ap.add_argument("--rounds", type=int, default=3, help="timings of every program, in turn; medians")
    ap.add_argument("--update", action="store_true", help="also: the predictor updated on the other models' programs")
    ap.add_argument(
        "--compare", type=Path,
        help="another registry (one that pulled an older starter bundle, say): its predictor scores the same programs "
        "(the rule \"compared predictor\")",
    )  # fmt: skip
    ap.add_argument("--work", type=Path, default=ROOT / "bench/work/donor_oracle")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/donor_oracle.json")
    args = ap.parse_args()
    if args.rejudge:
        for path in args.rejudge:
            for run in json.loads(path.read_text())["models"]:
                rules = summary(run["tasks"])
                print(path.name, run["model"], json.dumps({k: v["of_best"] for k, v in rules.items()}), flush=True)
        return
    if not args.models or args.registry is None:
        ap.error("name the models and --registry (or --rejudge earlier results)")
    for path in [args.registry, args.compare]:
        if path is not None and not path.is_file():
            ap.error(f"{path}: no such registry file")  # SQLite would create an empty one to copy
    args.work.mkdir(parents=True, exist_ok=True)
    result: dict = {"registry": args.registry.name, "candidates": args.candidates, "rounds": args.rounds}
    if args.compare:
        result["compared"] = args.compare.name
    runs = []
    for name in args.models:
        [run], model = measured_candidates(name, args.registry, args.work, args.candidates, args.rounds, args.compare)
        run = {"model": name, **run, "rules": summary(run["tasks"])}
        runs.append(run)
        print(json.dumps({"model": name, "tasks": len(run["tasks"]), "rules": run["rules"]}), flush=True)
    if args.update and len(runs) > 1:
        result["updated"] = updated(model, runs)
        print(json.dumps(result["updated"]), flush=True)
    for run in runs:  # the features stay out of the result file
        for t in run["tasks"]:
            for c in t["candidates"]:
                c.pop("features")
    result["models"] = runs
    args.out.write_text(json.dumps(stamped(result), separators=(",", ":")))  # every program: kept compact
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
