"""How long the ranking predictor takes to rank a batch of candidates, as a tuning run or a transfer asks it.

    .venv/bin/python bench/predictor/speed.py [--db URL] [--device SELECTOR] [--candidates 1000] [--rounds 5] [--task T]

Samples ``--candidates`` schedules of one corpus workload (``--task``'s, else the first convolution: many blocks, the
slow case) from its design spaces, then times ``RankingModel.predict`` on all of them (features from the scheduled
TIR, then the booster), the median of ``--rounds`` runs, on the device's newest ranking predictor of the registry;
and the feature extraction alone (MetaSchedule's ``PerStoreFeature``, which TVM's own XGBModel runs too).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=f"sqlite:///{ROOT / 'bench' / 'predictor' / 'data' / 'collect.db'}")
    parser.add_argument("--device", default="1")
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--task", default="", help="the first workload of this task name (default: the first conv2d)")
    args = parser.parse_args()

    import tvm
    from tvm.s_tir.meta_schedule import TuneContext

    from bench.machine_speed import stamped
    from registry.pipeline.design_space import sample
    from registry.store.factory import open_storage
    from registry.tvm_side.predictor import load_predictor

    storage = open_storage(args.db, create_new=False)
    device = storage.resolve_one_device(args.device)
    model, version = load_predictor(storage, device.id)
    counts = storage.ok_record_counts(device.id)
    wanted = (lambda name: name == args.task) if args.task else (lambda name: "conv2d" in name)
    wid, (task, _) = next((w, c) for w, c in sorted(counts.items()) if wanted(c[0]))
    stored = storage.workloads_by_id([wid])[wid]
    mod = tvm.ir.load_json(stored.mod_json)
    target = json.loads(device.target_json)
    candidates = [c for c, _ in sample(mod, tvm.target.Target(target), task, args.candidates, seed=0)]
    context = TuneContext(mod=mod, target=tvm.target.Target(target), task_name=task)
    times, features = [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        model.predict(context, candidates)
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        model.extractor.extract_from(context, candidates)  # the features alone: what any MetaSchedule model reads
        features.append(time.perf_counter() - start)
    print(json.dumps(stamped({
        "predictor_version": version,
        "workload": task, "candidates": len(candidates), "median_s": round(statistics.median(times), 3),
        "runs_s": [round(t, 3) for t in times], "features_median_s": round(statistics.median(features), 3),
    })))  # fmt: skip


if __name__ == "__main__":
    main()
