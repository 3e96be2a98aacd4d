"""Build the starter bundle (``registry pull starter``) from the corpus benchmark's tuned registries.

    .venv/bin/python bench/corpus/starter.py [--work bench/work/corpus] [--out registry/bundles/starter.bundle]
    .venv/bin/python bench/corpus/starter.py --base registry/share/bundles/starter.bundle --add REGISTRY.db ...
    .venv/bin/python bench/corpus/starter.py --base registry/share/bundles/starter.bundle --predictor DATASET.db

Every model's registry (``WORK/tune/MODEL.db``, written by ``bench/corpus/run.py``; or, with ``--base``, the
records of that bundle, and then each ``--add`` registry, such as the YOLO that ``bench/cnn_bench.py`` tuned) is
synced into one registry (a copy of each is upgraded first when it was written at an older schema), and the best
record of each workload is exported as a bundle, with the models and their tasks. With ``--predictor``, the newest
ranking predictor of that registry (``bench/predictor``'s dataset, trained there with ``registry predictor train``)
goes with it, stored as the predictor of each of the bundle's devices (a ranking predictor ranks for whichever device
loads it; its metrics name the device it was trained on), so that ``registry pull starter`` gives a new registry a
predictor. Prints what it holds and its size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = str(Path(sys.executable).with_name("registry"))


def registry(*args: str) -> dict:
    done = subprocess.run([REGISTRY, *args, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"registry {' '.join(args)}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout[done.stdout.index("{") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "corpus")
    parser.add_argument("--out", type=Path, default=ROOT / "registry" / "share" / "bundles" / "starter.bundle")
    parser.add_argument("--base", type=Path, help="start from this bundle's records instead of WORK's registries")
    parser.add_argument("--add", type=Path, nargs="+", default=[], help="registries synced in after the others")
    parser.add_argument("--predictor", type=Path, help="an SQLite registry whose newest ranking predictor travels")
    args = parser.parse_args()
    tuned = [] if args.base else sorted((args.work / "tune").glob("*.db"))
    if not tuned and not args.base:
        raise SystemExit(f"no tuned registries under {args.work / 'tune'}: run bench/corpus/run.py first")
    with tempfile.TemporaryDirectory() as tmp:
        starter = f"sqlite:///{Path(tmp) / 'starter.db'}"
        if args.base:
            base = Path(tmp) / "base.bundle"
            base.write_bytes(args.base.read_bytes())  # --out may be the same file
            print(f"{args.base.name}: {registry('--db', starter, 'import', str(base))['records_new']} records")
        for db in [*tuned, *args.add]:
            copy = Path(tmp) / db.name
            copy.write_bytes(db.read_bytes())  # the benchmark's own file stays as it is
            registry("--db", f"sqlite:///{copy}", "db", "upgrade")
            result = registry("sync", f"sqlite:///{copy}", starter)
            print(f"{db.stem}: {result['records_new']} records", flush=True)
        if args.predictor:
            print(ship_predictor(f"sqlite:///{args.predictor}", starter))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        info = registry("--db", starter, "export", "--bundle", str(args.out), "--best-only")
    print(f"{args.out}: {info['records']} records of {info['workloads']} workloads, {info['models']} models, "
          f"{info['bytes'] / 1e6:.1f} MB")  # fmt: skip


def ship_predictor(source_url: str, starter_url: str) -> str:
    """The newest ranking predictor of ``source_url``, stored as each device's of ``starter_url``."""
    from registry.store.factory import open_storage
    from registry.store.values import PredictorIn
    from registry.tvm_side.predictor_blob import RANK_KIND

    source, starter = open_storage(source_url, create_new=False), open_storage(starter_url, create_new=False)
    infos = [p for p in source.list_predictors() if p.kind == RANK_KIND]
    if not infos:
        raise SystemExit(f"{source_url}: no {RANK_KIND} predictor: train one with `registry predictor train`")
    newest = max(infos, key=lambda p: p.created_at)
    stored = source.latest_predictor(newest.device_id, RANK_KIND)
    metrics = {"trained_on": f"{newest.device} ({newest.n_records} programs)", **stored.metrics}
    metrics.pop("per_workload", None)  # workload ids of the dataset's registry
    kind = json.loads(next(d for d in source.all_devices() if d.id == newest.device_id).target_json)["kind"]
    for device in [d for d in starter.all_devices() if json.loads(d.target_json)["kind"] == kind]:
        starter.save_predictor(
            PredictorIn(
                device.id, RANK_KIND, stored.blob, metrics, newest.n_workloads, newest.n_records, stored.tvm_version
            )  # fmt: skip
        )
    return f"predictor v{newest.version} of {newest.device} ({len(stored.blob) / 1e6:.1f} MB) for every {kind} device"


if __name__ == "__main__":
    main()
