"""How long ``registry predictor train`` takes, as a user runs it, on the collected dataset of one device.

    .venv/bin/python bench/predictor/train_time.py [--bundle bench/predictor/data/llvm-znver4-2c-1t.bundle]
        [--db sqlite:///bench/work/predictor-train/train.db] [--rounds 1] [--out bench/results/predictor-train.json]

The bundle is imported once into ``--db`` (kept and reused: ``registry import`` checks every record first, which is
not what this times); then ``registry --db DB predictor train --device 1 --json`` runs ``--rounds`` times, each a
process of its own, with every default (a quarter of the workloads held out and judged, then the model trained on
all): every trace replayed, its features extracted, the booster trained. Each run's wall time is the whole command's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.machine_speed import stamped  # noqa: E402
from bench.predictor.with_devices import REGISTRY, import_once  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data = ROOT / "bench" / "predictor" / "data"
    parser.add_argument("--bundle", type=Path, default=data / "llvm-znver4-2c-1t.bundle")
    parser.add_argument("--db", default=f"sqlite:///{ROOT / 'bench' / 'work' / 'predictor-train' / 'train.db'}")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "predictor-train.json")
    args = parser.parse_args()

    import_once(args.db, [args.bundle])
    runs = []
    for i in range(args.rounds):
        start = time.perf_counter()
        done = subprocess.run(
            [REGISTRY, "--db", args.db, "predictor", "train", "--device", "1", "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - start
        report = json.loads(done.stdout)
        runs.append({
            "wall_s": round(wall, 1), "train_s": report["train_seconds"], "records": report["records"],
            "workloads": report["workloads"], "held_out": report.get("held_out"), "random": report.get("random"),
        })  # fmt: skip
        print(f"round {i + 1}: {wall:.1f} s for {report['records']} records", flush=True)
    result = {
        "command": "registry predictor train --device 1",
        "bundle": str(args.bundle.relative_to(ROOT) if args.bundle.is_relative_to(ROOT) else args.bundle),
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
        "runs": runs,
    }
    args.out.write_text(json.dumps(stamped(result), indent=1))


if __name__ == "__main__":
    main()
