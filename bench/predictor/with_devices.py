"""Does a device's predictor rank better trained on other devices' records too? ``registry predictor train
--with-device``, as a user runs it, against the same device's records alone.

    .venv/bin/python bench/predictor/with_devices.py --db sqlite:///bench/work/with-devices/registry.db
        --case llvm-rocketlake-2c-1t --case llvm-rocketlake-2c-1t+llvm-emeraldrapids-2c-1t ... [--seeds 0 1 2]
        [--bundle bench/predictor/data/llvm-znver4-2c-1t.bundle ...] [--out bench/results/predictor-with-devices.json]

Each ``--case`` is a ``+``-joined list of device names: the first is trained for and judged, the rest are its
``--with-device``. Each case runs ``registry --db DB predictor train --device FIRST --with-device ... --seed S
--json`` for every seed, a process of its own with every other default: a quarter of FIRST's workloads held out
(drawn by the seed, so every case of one device and seed holds out the same workloads, of every device's records),
their programs ranked by a model trained on the rest, TenSet's top-1/top-5 scores beside a random ranking's. The
bundles are imported into ``--db`` first where it has no devices yet (kept and reused).
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

REGISTRY = str(ROOT / ".venv" / "bin" / "registry")
FIGURES = ("top1", "top5", "spearman", "regret@1")


def import_once(db: str, bundles: list[Path]) -> None:
    """Import ``bundles`` into ``db`` unless it already has devices (``registry import`` checks every record: slow,
    and not what a benchmark of training times)."""
    if db.startswith("sqlite:///"):
        Path(db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    devices = subprocess.run([REGISTRY, "--db", db, "devices", "--json"], capture_output=True, text=True)
    if devices.returncode == 0 and json.loads(devices.stdout).get("rows"):
        return
    for bundle in bundles:
        print(f"importing {bundle}", flush=True)
        subprocess.run([REGISTRY, "--db", db, "import", str(bundle), "-q"], check=True)


def train(db: str, devices: list[str], seed: int) -> dict:
    """One ``registry predictor train`` of ``devices[0]`` with the rest, as a process of its own: its held-out
    figures and wall time."""
    command = [REGISTRY, "--db", db, "predictor", "train", "--device", devices[0], "--seed", str(seed), "--json"]
    for other in devices[1:]:
        command += ["--with-device", other]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    return {
        "seed": seed, "wall_s": round(time.perf_counter() - start, 1), "records": report["records"],
        "workloads": report["workloads"], "held_out_workloads": report["held_out"]["workloads"],
        **{k: round(report["held_out"][k], 4) for k in FIGURES},
        **{f"random_{k}": round(report["random"][k], 4) for k in FIGURES},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data = ROOT / "bench" / "predictor" / "data"
    parser.add_argument("--db", default=f"sqlite:///{ROOT / 'bench' / 'work' / 'with-devices' / 'registry.db'}")
    parser.add_argument("--bundle", type=Path, action="append", help="default: every bundle of the dataset")
    parser.add_argument("--case", action="append", required=True, help="DEVICE[+OTHER...]: trained for DEVICE")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "predictor-with-devices.json")
    args = parser.parse_args()

    import_once(args.db, args.bundle or sorted(data.glob("*.bundle")))
    cases = []
    for case in args.case:
        devices = case.split("+")
        runs = []
        for seed in args.seeds:
            runs.append(train(args.db, devices, seed))
            r = runs[-1]
            print(f"{case} seed {seed}: top-1 {r['top1']:.3f} (random {r['random_top1']:.3f}), "
                  f"{r['records']} records, {r['wall_s']} s", flush=True)  # fmt: skip
        cases.append({
            "device": devices[0], "with_devices": devices[1:],
            **{f"median_{k}": round(statistics.median(r[k] for r in runs), 4) for k in ("top1", "top5", "wall_s")},
            "runs": runs,
        })  # fmt: skip
        args.out.write_text(json.dumps(stamped({"seeds": args.seeds, "cases": cases}), indent=1))


if __name__ == "__main__":
    main()
