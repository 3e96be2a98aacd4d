"""Which ranking model picks schedules best: held-out workloads and held-out models, TenSet's scores, one table.

    .venv/bin/python bench/predictor/evaluate.py [--db URL] [--device SELECTOR] [--variants a,b] [--retimed F] \
        [--train-on-retimed] [--stored URL:DEVICE] [--out FILE]

Each variant is trained on the programs of some workloads and ranks the programs of others it never saw:

- workloads held out whole: five folds over the workloads, each ranked by a model trained on the other four (and
  on ``--train-device``'s programs of those four: a predictor trained on several devices is judged as it is trained);
- models held out whole: for each of several corpus models, every workload of that model held out together (on
  ``--train-device`` too);
- devices held out whole (``--other-device``): a model trained on ``--device``'s records and ``--train-device``'s
  ranks each other device's programs, then (unless ``--quick``) the same with each held-out model's workloads left
  out of training too: a new model on a new device, as a new user's first transfer meets it;
- a stored predictor (``--stored URL:DEVICE``, the starter bundle's say): trained elsewhere, judged as it is on the
  ``--other-device`` programs (only those, ``--devices-only``: it trained on ``--device``'s workloads).

Workloads that only shape variants have (``collect.py --scale``) train every fold and every held-out model but its own
variants' (``--no-shape-variants``: none); they are never ranked. A workload is ranked when it has ``--min-programs``
ok programs or more. The figures are ``scores.workload_row``'s, weighted by task weight, beside a random ranking's.
The stored timings are one quick timing each, noisy enough to cap a perfect ranking's top-1 near 0.89
(``label_noise.py``); ``--retimed`` names that script's results (the programs of some workloads timed again in rounds)
and the folds' rankings of those workloads are judged again, against the stored timings and against the medians;
``--train-on-retimed`` trains every model on those medians where a workload has them.
Results go to ``bench/results/predictor-*.json`` with machine, commit and date.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.machine_speed import stamped  # noqa: E402
from bench.predictor import dataset  # noqa: E402
from bench.predictor.label_noise import stored_key, workloads_of  # noqa: E402
from bench.predictor.mlp import MLP  # noqa: E402
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

    def fit(self, train: list[dataset.WorkloadData], nthread: int = 1) -> None:
        """Learns from ``train``; ``nthread``: XGBoost's threads (the folds use one; ``train.py``, one a core)."""
        if self.objective == "registry":
            own = dict(self.params)
            sharpness = own.pop("sharpness", ranker.SHARPNESS)
            workloads = [(d.blocks, d.mean_s, d.device) for d in train]
            self.booster = ranker.fit(workloads, self.rounds, nthread=nthread, params=own, sharpness=sharpness)
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
        params = {**ranker.PARAMS, "nthread": nthread, "objective": self.objective, **self.params}
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


class Summed(Blend):
    """Several variants' scores summed: one model of their trees together (boosters trained with other seeds, say)."""

    def rank(self, d: dataset.WorkloadData) -> np.ndarray:
        return sum(v.rank(d) for v in self.parts)


class Stored(Variant):
    """A predictor as a registry stores it (the starter bundle's, say), named ``URL:DEVICE``: trained elsewhere, so
    ``fit`` learns nothing; it ranks with its own booster and each judged workload's device descriptor, as a transfer
    on that device ranks."""

    def __init__(self, spec: str) -> None:
        from registry.errors import RegistryError
        from registry.store.factory import open_storage
        from registry.tvm_side.predictor import load_predictor

        url, _, device = spec.rpartition(":")
        try:
            storage = open_storage(url, create_new=False)
            loaded = load_predictor(storage, storage.resolve_one_device(device).id)
        except RegistryError as e:
            raise SystemExit(f"--stored {spec}: {e}") from None
        if loaded is None or not isinstance(loaded[0], ranker.RankingModel):
            raise SystemExit(f"--stored {spec}: that device has no ranking predictor")
        self.booster = loaded[0].booster

    def fit(self, train: list[dataset.WorkloadData]) -> None:
        pass

    def rank(self, d: dataset.WorkloadData) -> np.ndarray:
        return ranker.program_scores(self.booster, d.blocks, d.device)


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
    "registry-gain2": lambda: Variant("registry", params={"sharpness": 2.0}),
    "registry-seed1": lambda: Variant("registry", params={"seed": 1}),
    "registry-seed2": lambda: Variant("registry", params={"seed": 2}),
    "registry-forest3": lambda: Variant("registry", params={"num_parallel_tree": 3}),
    "registry-forest3-seed1": lambda: Variant("registry", params={"num_parallel_tree": 3, "seed": 1}),
    "registry-forest3-seed2": lambda: Variant("registry", params={"num_parallel_tree": 3, "seed": 2}),
    "registry-forest5": lambda: Variant("registry", params={"num_parallel_tree": 5}),
    "registry-forest5-seed1": lambda: Variant("registry", params={"num_parallel_tree": 5, "seed": 1}),
    "registry-forest5-seed2": lambda: Variant("registry", params={"num_parallel_tree": 5, "seed": 2}),
    "registry-seeds3": lambda: Summed(*(Variant("registry", params={"seed": k}) for k in (0, 1, 2))),
    "registry-seeds3b": lambda: Summed(*(Variant("registry", params={"seed": k}) for k in (3, 4, 5))),
    "registry-gain8": lambda: Variant("registry", params={"sharpness": 8.0}),
    "registry-depth10": lambda: Variant("registry", params={"max_depth": 10}),
    "registry-slow": lambda: Variant("registry", params={"eta": 0.05}, rounds=600),
    "registry-forest3-r100": lambda: Variant("registry", params={"num_parallel_tree": 3}, rounds=100),
    "registry-forest3-r150": lambda: Variant("registry", params={"num_parallel_tree": 3}, rounds=150),
    "registry-allcols": lambda: Variant("registry", params={"colsample_bytree": 1.0, "subsample": 1.0}),
    "mlp": lambda: MLP(),
    "mlp-seed1": lambda: MLP(seed=1),
    "mlp-wide": lambda: MLP(hidden=512),
    "mlp-long": lambda: MLP(epochs=80),
    "mlp-deep": lambda: MLP(layers=4),
    "blend-registry-mlp": lambda: Blend(Variant("registry"), MLP()),
}


def ranked(variant: Variant, test: list, min_programs: int) -> tuple[list[dict], list[float]]:
    """The fitted ``variant``'s figures on each workload of ``test`` with enough programs, and their weights."""
    rows, weights = [], []
    for d in test:
        if d.size >= min_programs:
            rows.append(scores.workload_row(d.mean_s, variant.rank(d)))
            weights.append(d.weight)
    return rows, weights


def judge(variant: Variant, train: list, test: list, min_programs: int) -> tuple[list[dict], list[float]]:
    variant.fit(train)
    return ranked(variant, test, min_programs)


def retimed_labels(*paths: Path) -> dict[int, dict[float, float]]:
    """``label_noise.py``'s results: workload id -> {stored µs (``label_noise.stored_key``): median of the rounds}.
    A stored time that two programs of a workload share is left out: it cannot say which program was re-timed."""
    found = {}
    for w in workloads_of(*paths):
        stored = [p["stored_us"] for p in w["programs"]]
        found[w["workload"]] = {
            p["stored_us"]: float(np.median(p["rounds_us"])) for p in w["programs"] if stored.count(p["stored_us"]) == 1
        }
    return found


def matched(d: dataset.WorkloadData, medians: dict[float, float]) -> tuple[list[int], np.ndarray]:
    """The indices of ``d``'s programs that were re-timed, and their re-timed medians in µs."""
    stored_us = [stored_key(float(s)) for s in d.mean_s]
    keep = [i for i, us in enumerate(stored_us) if us in medians]
    return keep, np.array([medians[stored_us[i]] for i in keep])


def relabelled(d: dataset.WorkloadData, retimed: dict[int, dict[float, float]]) -> dataset.WorkloadData:
    """What ``--train-on-retimed`` trains on: a re-timed workload's re-timed programs only, each labelled by its median
    (one scale within a workload: a program left at its stored timing, 15-25% slower, would rank as slower than it
    is); a workload with fewer than two re-timed programs as it is."""
    keep, retimed_us = matched(d, retimed.get(d.workload_id, {}))
    if len(keep) < 2:
        return d
    return dataclasses.replace(d, blocks=[d.blocks[i] for i in keep], mean_s=retimed_us * 1e-6)


def judged_again(d: dataset.WorkloadData, rank: np.ndarray, medians: dict[float, float], min_programs: int):
    """A held-out workload's ranking judged twice on its re-timed programs: against their stored timings and against
    the re-timed medians; and the stored timings themselves as a ranking, judged against the medians (how well one
    quick timing a program picks). None where fewer than ``min_programs`` programs were re-timed."""
    keep, retimed = matched(d, medians)
    if len(keep) < min_programs:
        return None
    stored = d.mean_s[keep]
    return (
        scores.workload_row(stored, rank[keep]),
        scores.workload_row(retimed, rank[keep]),
        scores.workload_row(retimed, -stored),
    )


def held_out_workloads(
    variant_of,
    data: list,
    folds: int,
    min_programs: int,
    seed: int,
    extra: list = (),
    retimed: dict | None = None,
    train_on_retimed: bool = False,
) -> dict:
    """Five folds over ``data``'s workloads, each ranked by a model trained on the others' programs, and on ``extra``'s
    (other devices' programs) of the other workloads only: a held-out workload is held out on every device. With
    ``retimed`` (``retimed_labels``), the workloads it has are judged again on their re-timed programs, against the
    stored timings and against the re-timed medians (the same rankings, the labels' noise less), beside the stored
    timings themselves as a ranking; with ``train_on_retimed`` too, the folds train on the re-timed workloads'
    medians (``relabelled``) instead of their stored timings."""
    order = np.random.default_rng(seed).permutation(len(data))
    # ``data``'s only: another device's programs of a workload share its id, not its medians
    trained_as = [relabelled(d, retimed or {}) for d in data] if train_on_retimed else data
    rows, weights = [], []
    again: tuple[list, ...] = ([], [], [], [])  # judged_again's rows, then the weights
    for f in range(folds):
        test_idx = set(order[f::folds].tolist())
        held = {data[k].workload_id for k in test_idx}
        train = [d for k, d in enumerate(trained_as) if k not in test_idx]
        train += [d for d in extra if d.workload_id not in held]
        test = [d for k, d in enumerate(data) if k in test_idx]
        variant = variant_of()
        r, w = judge(variant, train, test, min_programs)
        rows += r
        weights += w
        for d in test:
            medians = (retimed or {}).get(d.workload_id)
            judged = judged_again(d, variant.rank(d), medians, min_programs) if medians else None
            if judged:
                for found, row in zip(again, (*judged, d.weight), strict=True):
                    found.append(row)
    figures = {"workloads": len(rows), **scores.weighted(rows, weights)}
    if again[3]:
        figures["retimed"] = {
            "workloads": len(again[3]),
            "stored_timings": scores.weighted(again[0], again[3]),
            "retimed_medians": scores.weighted(again[1], again[3]),
            "stored_timings_as_ranking": scores.weighted(again[2], again[3]),
        }
    return figures


def held_out_models(variant_of, data: list, min_programs: int, judged: dict | None = None) -> dict:
    """Each of HELD_OUT_MODELS ranked by a model trained on ``data`` without any of its workloads: its workloads of
    ``data``; or, given ``judged`` (device name -> its programs), its workloads of each of those devices (one
    figure a device)."""
    tests = {"": data} if judged is None else judged
    found = {name: ([], [], {}) for name in tests}  # rows, weights, per model
    for model in HELD_OUT_MODELS:
        train = [d for d in data if model not in {dataset.base_model(m) for m in d.models}]  # its variants too
        own = {name: [d for d in test if model in d.models] for name, test in tests.items()}
        if not train or not any(own.values()):
            continue
        variant = variant_of()
        variant.fit(train)
        for name, test in own.items():
            rows, weights, per_model = found[name]
            r, w = ranked(variant, test, min_programs)
            if r:
                per_model[model] = {"workloads": len(r), **scores.weighted(r, w)}
                rows += r
                weights += w
    figures = {
        name: {"workloads": len(rows), **scores.weighted(rows, weights), "per_model": per_model}
        for name, (rows, weights, per_model) in found.items()
    }
    return figures[""] if judged is None else figures


def line(figures: dict) -> str:
    if "top1" not in figures:
        return "nothing ranked"
    return (
        "top1 {top1:.3f} top5 {top5:.3f} rho {spearman:.2f} pairs {pairwise:.2f} regret {regret1:.2f} "
        "(random: top1 {random_top1:.3f} top5 {random_top5:.3f} regret {random_regret1:.2f})"
    ).format(**figures)


def held_out_devices(variant_of, train: list, others: dict, min_programs: int) -> dict:
    """Trained once on every workload of the training devices (``train``), judged on each other device's programs
    (``others``: device name -> its programs), which it never saw."""
    variant = variant_of()
    variant.fit(train)
    figures = {}
    for name, other in others.items():
        rows, weights = ranked(variant, other, min_programs)
        figures[name] = {"workloads": len(rows), **scores.weighted(rows, weights)} if rows else {}
    return figures


def _device_names(parser, url: str, trained: list[str], judged: list[str]) -> tuple[list[str], list[str]]:
    """The devices' names (the results name devices so, as ``train.py`` checks them), each named once: a judged
    device that is also a training device would be ranked on its own programs, and a training device named twice
    would train on its programs twice."""
    from registry.store.factory import open_storage

    storage = open_storage(url, create_new=False)
    rows = [storage.resolve_one_device(d) for d in [*trained, *judged]]
    if len({r.id for r in rows}) != len(rows):
        parser.error("--device, every --train-device and each --other-device must be different devices")
    names = [r.name for r in rows]
    return names[: len(trained)], names[len(trained) :]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=f"sqlite:///{ROOT / 'bench' / 'predictor' / 'data' / 'collect.db'}")
    parser.add_argument("--device", default="1")
    parser.add_argument("--variants", help=f"which (default: every one): {', '.join(VARIANTS)}")
    parser.add_argument(
        "--stored",
        action="append",
        default=[],
        help="URL:DEVICE, a registry's stored ranking predictor, judged as it is (its --variants name: stored:DEVICE;"
        " with --stored and no --variants, only those); e.g. the starter bundle's, imported into a registry"
        " (repeatable)",
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--min-programs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workload-features", action="store_true", help="MetaSchedule's extract_workload=True")
    parser.add_argument(
        "--other-device",
        action="append",
        default=[],
        help="a device judged by a model trained on --device's and --train-device's records only (repeatable)",
    )
    parser.add_argument(
        "--train-device",
        action="append",
        default=[],
        help="a device whose records join --device's in training: the folds' models (of the workloads each leaves in)"
        " and the one that judges --other-device (repeatable)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="no models held out (on --device, nor with the --other-device figures)"
    )
    parser.add_argument("--devices-only", action="store_true", help="only the --other-device figures")
    parser.add_argument(
        "--no-shape-variants", action="store_true", help="leave out the workloads only collect.py --scale gave"
    )
    parser.add_argument(
        "--retimed",
        type=Path,
        action="append",
        default=[],
        help="label_noise.py's result for --device: its workloads judged again against the re-timed medians"
        " (repeatable)",
    )
    parser.add_argument(
        "--train-on-retimed",
        action="store_true",
        help="every model trains on --retimed's medians where a workload has them (its other programs left out), not"
        " on the stored timings; judged as before",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.devices_only and not args.other_device:
        parser.error("--devices-only judges --other-device: name one")
    if args.stored and not args.devices_only:
        parser.error("--stored judges a predictor that trained on --device's workloads: add --devices-only")
    named = [f"stored:{spec.rpartition(':')[2]}" for spec in args.stored]
    if len(set(named)) < len(named):  # one variant a name: the second would replace the first's figures unseen
        parser.error("--stored: two predictors of one device name (stored:DEVICE): judge them in separate runs")
    if args.train_on_retimed and not args.retimed:
        parser.error("--train-on-retimed trains on --retimed's medians: name a result")
    trained, args.other_device = _device_names(parser, args.db, [args.device, *args.train_device], args.other_device)
    args.device, args.train_device = trained[0], trained[1:]

    def programs(device: str) -> tuple[list, list]:
        """The device's workloads that are judged, and those that only shape variants have (``collect.py --scale``:
        every fold and held-out model trains on them; none with ``--no-shape-variants``)."""
        found = [d for d in dataset.load(args.db, device, extract_workload=args.workload_features) if d.size >= 2]
        variants = [] if args.no_shape_variants else [d for d in found if not d.judged]
        return [d for d in found if d.judged], variants

    for name, spec in zip(named, args.stored, strict=True):
        VARIANTS[name] = lambda spec=spec: Stored(spec)
    if args.variants is None:
        args.variants = ",".join(v for v in VARIANTS if v.startswith("stored:") or not args.stored)
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: no variant {', '.join(unknown)}")
    retimed = retimed_labels(*args.retimed) if args.retimed else None
    start = time.monotonic()
    data, variants = programs(args.device)
    result = {
        "dataset": dataset.summary(data),
        "shape_variants": dataset.summary(variants),
        "features_s": round(time.monotonic() - start),
        "workload_features": args.workload_features,
        "trained_on_retimed": args.train_on_retimed,
        "stored": dict(zip(named, args.stored, strict=True)),  # which registry each stored:DEVICE variant came from
        "variants": {},
    }
    others = {name: programs(name)[0] for name in args.other_device}
    extra = variants + [d for name in args.train_device for part in programs(name) for d in part]
    device_train = [relabelled(d, retimed) for d in data] + extra if args.train_on_retimed else data + extra
    result["other_devices"] = {name: dataset.summary(other) for name, other in others.items()}
    result["device_training"] = {"devices": [args.device, *args.train_device], **dataset.summary(device_train)}
    # what the folds trained on: train.py stores these figures only with a predictor trained on the same devices
    result["workloads_training"] = [args.device, *args.train_device]
    print(json.dumps(result["dataset"]), flush=True)
    for name in args.variants.split(","):
        t = time.monotonic()
        workloads, models = {}, {}
        if not args.devices_only:
            workloads = held_out_workloads(
                VARIANTS[name], data, args.folds, args.min_programs, args.seed, extra, retimed, args.train_on_retimed
            )
        if not (args.quick or args.devices_only):
            # trained on every training device's programs of the other models, judged on --device's
            models = held_out_models(VARIANTS[name], device_train, args.min_programs, {"": data})[""]
        result["variants"][name] = {"workloads_held_out": workloads, "models_held_out": models}
        if others:
            devices = held_out_devices(VARIANTS[name], device_train, others, args.min_programs)
            both = {} if args.quick else held_out_models(VARIANTS[name], device_train, args.min_programs, others)
            result["variants"][name] |= {"devices_held_out": devices, "devices_and_models_held_out": both}
            for device_name in others:
                print(f"{name:16s} {device_name} held out: {line(devices[device_name])}", flush=True)
                if both:
                    print(f"{name:16s} {device_name} and the models: {line(both[device_name])}", flush=True)
        seconds = result["variants"][name]["seconds"] = round(time.monotonic() - t)
        print(f"{name:16s} {seconds:4d} s  {line(workloads)}  |  models held out: {line(models)}", flush=True)
        if "retimed" in workloads:
            again = workloads["retimed"]
            print(
                f"{'':16s} {again['workloads']} re-timed workloads, against the stored timings: "
                f"{line(again['stored_timings'])}",
                flush=True,
            )
            print(f"{'':16s} the same, against the re-timed medians: {line(again['retimed_medians'])}", flush=True)
            print(f"{'':16s} the stored timings as a ranking: {line(again['stored_timings_as_ranking'])}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(stamped(result), indent=1))


if __name__ == "__main__":
    main()
