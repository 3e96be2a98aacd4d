"""Train the ranking predictor that ships with the starter bundle, on the collected dataset of one or more devices.

    .venv/bin/python bench/predictor/train.py --evaluation bench/results/predictor-*.json [--device 1 --device 2]

The same model as ``registry predictor train --kind xgb-rank-v1`` (``registry.tvm_side.ranker.fit``), on the features
``bench/predictor/dataset.py`` caches, of every workload of every ``--device`` at once (each program's rows carry its
device's descriptor), so that one predictor ranks for each of them and for their siblings. Its held-out figures are
the evaluation's (``bench/predictor/evaluate.py``, workloads held out whole: the folds judge models trained the same
way on four fifths). It is stored in the dataset's registry as the first device's next predictor version, where
``bench/corpus/starter.py --predictor`` takes it from.

``--variant NAME`` trains one of ``evaluate.py``'s other recipes of the registry's model instead (its XGBoost
parameters and rounds: ``registry-forest5``, five trees a round) and carries that variant's figures; ``--seed K``
draws the booster again with another XGBoost seed (its row and column sampling), keeping the recipe's figures: the
folds judged the recipe, and the seed is one draw of it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.predictor import dataset  # noqa: E402


def held_out_metrics(evaluation: dict, trained_on: list[str], variant: str = "registry") -> dict:
    """The evaluation's figures for ``variant``, as ``registry predictor train`` reports them; refused where its folds
    trained on other devices than this predictor (their figures would be another model's)."""
    training = evaluation.get("workloads_training")
    if training is None:
        raise SystemExit("--evaluation: it does not name the devices its folds trained on: run evaluate.py again")
    if sorted(training) != sorted(trained_on):
        raise SystemExit(f"--evaluation: its folds trained on {training}, this predictor on {trained_on}")
    figures = evaluation["variants"].get(variant, {}).get("workloads_held_out", {})
    if "top1" not in figures:
        raise SystemExit(
            f"--evaluation: no workloads-held-out figures of the {variant} variant (a --devices-only run?)"
        )
    return {
        "held_out": {
            "workloads": figures["workloads"],
            "top1": figures["top1"],
            "top5": figures["top5"],
            "spearman": figures["spearman"],
            "regret@1": figures["regret1"],
        },
        "random": {
            "top1": figures["random_top1"],
            "top5": figures["random_top5"],
            "spearman": 0.0,
            "regret@1": figures["random_regret1"],
        },
    }


def unseen_device_metrics(evaluations: list[dict], trained_on: list[str], variant: str = "registry") -> dict:
    """Each evaluation's figures for ``variant`` on devices it never trained on, by device, as the predictor's
    metrics keep them ("unseen_devices"); refused where an evaluation trained on other devices."""
    out = {}
    for evaluation in evaluations:
        training = evaluation["device_training"]["devices"]
        if sorted(training) != sorted(trained_on):
            raise SystemExit(f"--devices-evaluation: trained on {training}, this predictor on {trained_on}")
        for name, f in evaluation["variants"].get(variant, {}).get("devices_held_out", {}).items():
            out[name] = {"workloads": f["workloads"], "top1": f["top1"], "top5": f["top5"],
                         "random_top1": f["random_top1"]}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=f"sqlite:///{ROOT / 'bench' / 'predictor' / 'data' / 'collect.db'}")
    parser.add_argument("--device", action="append", help="devices whose programs it trains on (default: 1)")
    parser.add_argument("--evaluation", type=Path, required=True, help="bench/predictor/evaluate.py's result")
    parser.add_argument(
        "--devices-evaluation", type=Path, action="append", default=[],
        help="evaluate.py's result with --train-device as --device and devices held out (--other-device)",
    )  # fmt: skip
    parser.add_argument("--variant", default="registry", help="evaluate.py's recipe of the registry's model")
    parser.add_argument("--seed", type=int, help="XGBoost's seed (default: the variant's)")
    args = parser.parse_args()
    from bench.predictor.evaluate import VARIANTS, Variant

    recipe = VARIANTS[args.variant]() if args.variant in VARIANTS else None
    if recipe is None or type(recipe) is not Variant or recipe.objective != "registry":
        parser.error(
            f"--variant {args.variant}: not one booster of the registry's model (registry, registry-forest5, ...)"
        )
    if args.seed is not None:
        recipe.params["seed"] = args.seed

    from tvm.target import Target

    from registry.store.factory import open_storage
    from registry.tvm_side.predictor import save, xgboost_threads
    from registry.tvm_side.ranker import RankingModel

    devices = args.device or ["1"]
    start = time.monotonic()
    data = [d for device in devices for d in dataset.load(args.db, device) if d.size >= 2]
    recipe.fit(data, nthread=xgboost_threads())
    storage = open_storage(args.db, create_new=False)
    rows = [storage.resolve_one_device(device) for device in devices]
    first = rows[0]
    model = RankingModel(recipe.booster, Target(json.loads(first.target_json)), first.num_threads)
    metrics = {
        "device": f"{first.id}:{first.name}",
        "trained_on": " + ".join(f"{r.name}" for r in rows) + f" ({sum(d.size for d in data)} programs)",
        "workloads": len({d.workload_id for d in data}),
        "records": int(sum(d.size for d in data)),
        "skipped_records": 0,
        "train_seconds": round(time.monotonic() - start, 1),
        "recipe": {"variant": args.variant, **recipe.params},
        **held_out_metrics(json.loads(args.evaluation.read_text()), [r.name for r in rows], args.variant),
    }
    evaluations = [json.loads(p.read_text()) for p in args.devices_evaluation]
    unseen = unseen_device_metrics(evaluations, [r.name for r in rows], args.variant)
    if unseen:
        metrics["unseen_devices"] = unseen
    version = save(storage, first.id, model, metrics)
    print(json.dumps({"version": version, **{k: v for k, v in metrics.items() if k != "random"}}))


if __name__ == "__main__":
    main()
