"""Build the starter bundle (``registry pull starter``) from the corpus benchmark's tuned registries.

    .venv/bin/python bench/corpus/starter.py [--work bench/work/corpus] [--out registry/bundles/starter.bundle]
    .venv/bin/python bench/corpus/starter.py --base registry/share/bundles/starter.bundle --add REGISTRY.db ...
    .venv/bin/python bench/corpus/starter.py --base registry/share/bundles/starter.bundle --predictor DATASET.db

Every model's registry (``WORK/tune/MODEL.db``, written by ``bench/corpus/run.py``; or, with ``--base``, the
records of that bundle, and then each ``--add`` registry, such as the YOLO that ``bench/cnn_bench.py`` tuned) is
synced into one registry (a copy of each is upgraded first when it was written at an older schema), and the best
record of each workload is exported as a bundle, with the models and their tasks. With ``--predictor``, the newest
ranking predictor of each device class of that registry (``bench/predictor``'s dataset, trained there with
``bench/predictor/train.py``: one for AVX-512 CPUs, one for AVX2) goes with it, stored as the predictor of each of
the bundle's devices of its class, or of its own device where the bundle has none of that class (a ranking predictor
ranks for whichever device loads it; its metrics name the devices it was trained on), so that ``registry pull
starter`` gives a new registry a predictor for either class. Prints what it holds and its size.
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
            print("\n".join(ship_predictors(f"sqlite:///{args.predictor}", starter)))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        info = export(starter, args.out)
    print(f"{args.out}: {info.records} records of {info.workloads} workloads, {info.models} models, "
          f"{info.predictors} predictor(s), {info.bytes / 1e6:.1f} MB")  # fmt: skip


def export(starter_url: str, out: Path):
    """The best record of each workload, with the models, the devices and their predictors, as ``registry export
    --bundle OUT --best-only`` writes it; and every device that holds a predictor, with or without records (the
    AVX2 class's: ``ship_predictors``; or one that came with ``--base``)."""
    from registry.share.export import export_bundle
    from registry.store.factory import open_storage
    from registry.store.values import ExchangeFilters

    store = open_storage(starter_url, create_new=False)
    holding = tuple(d.key for d in store.all_devices() if store.list_predictors(d.id))
    return export_bundle(store, out, ExchangeFilters(best_only=True), predictor_devices=holding)


def ship_predictors(source_url: str, starter_url: str) -> list[str]:
    """The newest ranking predictor of each device class of ``source_url`` (``ranker.device_class``: one per vector
    width, one per GPU arch; a predictor's class is that of the device it is stored as: ``bench/predictor/train.py``'s
    first ``--device``), stored as the predictor of each of ``starter_url``'s devices of that class, or, where it has
    none, of the predictor's own device, added to travel for it alone. Refuses two devices' predictors of one class
    (which one is meant?). Returns a line for each class."""
    from tvm.target import Target

    from registry.store.decode import device_spec
    from registry.store.factory import open_storage
    from registry.store.values import PredictorIn
    from registry.tvm_side.predictor_blob import RANK_KIND
    from registry.tvm_side.ranker import device_class

    source, starter = open_storage(source_url, create_new=False), open_storage(starter_url, create_new=False)
    classed = lambda d: device_class(Target(json.loads(d.target_json)))  # noqa: E731
    devices = {d.id: d for d in source.all_devices()}
    newest: dict = {}
    for info in sorted((p for p in source.list_predictors() if p.kind == RANK_KIND), key=lambda p: p.created_at):
        cls = classed(devices[info.device_id])
        if cls in newest and newest[cls].device_id != info.device_id:
            raise SystemExit(f"{source_url}: predictors of devices {newest[cls].device} and {info.device}, both of "
                             f"class {cls}: train each class's on a device of its own class")  # fmt: skip
        newest[cls] = info
    if not newest:
        raise SystemExit(f"{source_url}: no {RANK_KIND} predictor: train one with bench/predictor/train.py")
    lines = []
    for cls, info in sorted(newest.items()):
        stored = source.latest_predictor(info.device_id, RANK_KIND)
        metrics = {"trained_on": f"{info.device} ({info.n_records} programs)", **stored.metrics}
        metrics.pop("per_workload", None)  # workload ids of the dataset's registry
        targets = [d.id for d in starter.all_devices() if classed(d) == cls]
        if not targets:
            targets = [starter.add_device(device_spec(devices[info.device_id]))]
        for device_id in targets:
            starter.save_predictor(
                PredictorIn(device_id, RANK_KIND, stored.blob, metrics, info.n_workloads, info.n_records,
                            stored.tvm_version)
            )  # fmt: skip
        lines.append(f"{cls}: predictor v{info.version} of {info.device} ({len(stored.blob) / 1e6:.1f} MB), "
                     f"for {len(targets)} device(s)")  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
