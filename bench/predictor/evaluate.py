"""Which ranking model picks schedules best: held-out workloads and held-out models, TenSet's scores, one table.

    .venv/bin/python bench/predictor/evaluate.py [--db URL] [--device SELECTOR] [--variants a,b] [--out FILE]

Each variant is trained on the programs of some workloads and ranks the programs of others it never saw:

- workloads held out whole: five folds over the workloads, each ranked by a model trained on the other four;
- models held out whole: for each of several corpus models, every workload of that model held out together.

A workload is ranked when it has ``--min-programs`` ok programs or more. The figures are ``scores.workload_row``'s,
weighted by task weight, beside a random ranking's. Results go to ``bench/results/predictor-*.json`` with machine,
commit and date.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.machine_speed import stamped  # noqa: E402
from bench.predictor import dataset  # noqa: E402
from registry.tvm_side import predictor_scores as scores  # noqa: E402
from registry.tvm_side import ranker  # noqa: E402

HELD_OUT_MODELS = ("bert-l2-h128", "whisper-encoder-l2-d128", "resnet-bottleneck-w64", "mobilenetv2-0.35",
                   "ppocr-v4-det", "nudenet-yolov8n-320")  # fmt: skip


def normalised(d: dataset.WorkloadData) -> np.ndarray:
    return d.mean_s.min() / d.mean_s


def summed_rows(d: dataset.WorkloadData, pooling: str) -> np.ndarray:
    """One row per program, for XGBoost's built-in objectives: its blocks' features summed (and each feature's maximum
    over blocks beside, for "sum+max"), then the device."""
    rows = [b.sum(axis=0) if pooling == "sum" else np.concatenate([b.sum(axis=0), b.max(axis=0)]) for b in d.blocks]
    return np.hstack([np.asarray(rows), np.tile(d.device, (d.size, 1))]).astype(np.float32)


class Variant:
    """A ranking model: ``fit`` on workloads, then ``rank`` one workload's programs (higher: predicted faster).
    "registry" is ``registry.tvm_side.ranker`` (pack-sum rows, pairwise loss) with ``params`` overriding its own;
    "tvm" is MetaSchedule's XGBModel (pack-sum regression on normalised throughput); the others are XGBoost's built-in
    objectives over one summed row a program."""

    def __init__(self, objective: str, pooling: str = "sum", params: dict | None = None, rounds: int = ranker.ROUNDS):
        self.objective, self.pooling, self.params, self.rounds = objective, pooling, dict(params or {}), rounds

    def fit(self, train: list[dataset.WorkloadData]) -> None:
        if self.objective == "registry":
            own = dict(self.params)
            sharpness = own.pop("sharpness", ranker.SHARPNESS)
            workloads = [(d.blocks, d.mean_s, d.device) for d in train]
            self.booster = ranker.fit(workloads, self.rounds, params=own, sharpness=sharpness)
            return
        if self.objective == "tvm":
            from registry.tvm_side.predictor import new_model

            self.model = new_model()
            self.model._train([b for d in train for b in d.blocks], np.concatenate([normalised(d) for d in train]))
            return
        import xgboost as xgb

        x = np.concatenate([summed_rows(d, self.pooling) for d in train])
        y = np.concatenate([normalised(d) for d in train])
        qid = np.concatenate([[k] * d.size for k, d in enumerate(train)])
        if self.objective == "rank:ndcg":
            y = np.round(y * 20)  # graded relevance: NDCG's gain 2^rel wants small integers
        params = {**ranker.PARAMS, "nthread": 1, "objective": self.objective, **self.params}
        matrix = xgb.DMatrix(x, label=y, qid=None if self.objective.startswith("reg:") else qid)
        self.booster = xgb.train(params, matrix, num_boost_round=self.rounds)

    def rank(self, d: dataset.WorkloadData) -> np.ndarray:
        if self.objective == "registry":
            return ranker.program_scores(self.booster, d.blocks, d.device)
        if self.objective == "tvm":
            return np.asarray(self.model._predict(d.blocks))
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(summed_rows(d, self.pooling)))


class Blend(Variant):
    """Several variants at once: each program's ranks within its workload under each, summed (ties broken by the
    first variant's score): whether models that err differently rank better together."""

    def __init__(self, *parts: Variant) -> None:
        self.parts = parts

    def fit(self, train: list[dataset.WorkloadData]) -> None:
        for v in self.parts:
            v.fit(train)

    def rank(self, d: dataset.WorkloadData) -> np.ndarray:
        from scipy.stats import rankdata

        first = rankdata(self.parts[0].rank(d))
        return sum((rankdata(v.rank(d)) for v in self.parts[1:]), first) + first / (d.size + 1)


VARIANTS = {
    "registry": lambda: Variant("registry"),
    "blend-registry-tvm": lambda: Blend(Variant("registry"), Variant("tvm")),
    "tvm-reg": lambda: Variant("tvm"),
    "pairwise-sum": lambda: Variant("rank:pairwise"),
    "ndcg-sum": lambda: Variant("rank:ndcg", params={"lambdarank_pair_method": "topk"}),
    "reg-sum": lambda: Variant("reg:squarederror"),
    "pairwise-summax": lambda: Variant("rank:pairwise", "sum+max"),
    "registry-gain0": lambda: Variant("registry", params={"sharpness": 0.0}),
    "registry-depth6": lambda: Variant("registry", params={"max_depth": 6}),
    "registry-gain8": lambda: Variant("registry", params={"sharpness": 8.0}),
    "registry-depth10": lambda: Variant("registry", params={"max_depth": 10}),
    "registry-slow": lambda: Variant("registry", params={"eta": 0.05}, rounds=600),
    "registry-allcols": lambda: Variant("registry", params={"colsample_bytree": 1.0, "subsample": 1.0}),
}


def judge(variant: Variant, train: list, test: list, min_programs: int) -> tuple[list[dict], list[float]]:
    variant.fit(train)
    rows, weights = [], []
    for d in test:
        if d.size >= min_programs:
            rows.append(scores.workload_row(d.mean_s, variant.rank(d)))
            weights.append(d.weight)
    return rows, weights


def held_out_workloads(variant_of, data: list, folds: int, min_programs: int, seed: int) -> dict:
    order = np.random.default_rng(seed).permutation(len(data))
    rows, weights = [], []
    for f in range(folds):
        test_idx = set(order[f::folds].tolist())
        train = [d for k, d in enumerate(data) if k not in test_idx]
        test = [d for k, d in enumerate(data) if k in test_idx]
        r, w = judge(variant_of(), train, test, min_programs)
        rows += r
        weights += w
    return {"workloads": len(rows), **scores.weighted(rows, weights)}


def held_out_models(variant_of, data: list, min_programs: int) -> dict:
    rows, weights, per_model = [], [], {}
    for model in HELD_OUT_MODELS:
        test = [d for d in data if model in d.models]
        train = [d for d in data if model not in d.models]
        if not test or not train:
            continue
        r, w = judge(variant_of(), train, test, min_programs)
        if r:
            per_model[model] = {"workloads": len(r), **scores.weighted(r, w)}
            rows += r
            weights += w
    return {"workloads": len(rows), **scores.weighted(rows, weights), "per_model": per_model}


def line(figures: dict) -> str:
    if "top1" not in figures:
        return "nothing ranked"
    return (
        "top1 {top1:.3f} top5 {top5:.3f} rho {spearman:.2f} pairs {pairwise:.2f} regret {regret1:.2f} "
        "(random: top1 {random_top1:.3f} top5 {random_top5:.3f} regret {random_regret1:.2f})"
    ).format(**figures)


def held_out_device(variant_of, data: list, other: list, min_programs: int) -> dict:
    """Trained on every workload of ``data``'s device, judged on another device's programs (``other``)."""
    rows, weights = judge(variant_of(), data, other, min_programs)
    return {"workloads": len(rows), **scores.weighted(rows, weights)} if rows else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=f"sqlite:///{ROOT / 'bench' / 'predictor' / 'data' / 'collect.db'}")
    parser.add_argument("--device", default="1")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--min-programs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workload-features", action="store_true", help="MetaSchedule's extract_workload=True")
    parser.add_argument("--other-device", help="a device judged by a model trained on --device's records only")
    parser.add_argument("--quick", action="store_true", help="workloads held out only (no models held out)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    start = time.monotonic()
    data = [d for d in dataset.load(args.db, args.device, extract_workload=args.workload_features) if d.size >= 2]
    result = {
        "dataset": dataset.summary(data),
        "features_s": round(time.monotonic() - start),
        "workload_features": args.workload_features,
        "variants": {},
    }
    other = []
    if args.other_device:
        other = [d for d in dataset.load(args.db, args.other_device) if d.size >= 2]
        result["other_device"] = {"device": args.other_device, **dataset.summary(other)}
    print(json.dumps(result["dataset"]), flush=True)
    for name in args.variants.split(","):
        t = time.monotonic()
        workloads = held_out_workloads(VARIANTS[name], data, args.folds, args.min_programs, args.seed)
        models = held_out_models(VARIANTS[name], data, args.min_programs) if not args.quick else {}
        result["variants"][name] = {"workloads_held_out": workloads, "models_held_out": models,
                                    "seconds": round(time.monotonic() - t)}  # fmt: skip
        if other:
            result["variants"][name]["device_held_out"] = device = held_out_device(
                VARIANTS[name], data, other, args.min_programs
            )
            print(f"{name:16s} device held out: {line(device)}", flush=True)
        seconds = time.monotonic() - t
        print(f"{name:16s} {seconds:4.0f} s  {line(workloads)}  |  models held out: {line(models)}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(stamped(result), indent=1))


if __name__ == "__main__":
    main()
