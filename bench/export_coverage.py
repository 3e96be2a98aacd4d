"""What `registry export -o` gives plain TVM's kernels of each stored model, and what the registries hold of their
softmaxes: the figures behind "The softmax on plain TVM's kernel" (docs/BENCHMARKS.md).

    .venv/bin/python bench/export_coverage.py REGISTRY.db [...] [--out bench/results/export-coverage.json]

For each registry (its first device): how many kernels plain TVM extracts differently from the registry, how many
get a replayed record (``registry.share.plain_export.plain_records``, as the export runs it), and which get none; and
for each softmax workload, its records on the device: how many, the best's latency, whether the best is TVM's
default schedule (a trace that changes nothing), and the range of the others.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def softmaxes(store, device_id: int) -> list[dict]:
    from registry.store.validation import is_default_schedule

    found = []
    for wid, (task, _) in sorted(store.ok_record_counts(device_id).items()):
        if "softmax" not in task:
            continue
        records = store.top_k(wid, device_id, 1000)
        default = [is_default_schedule(json.loads(r.trace_json)[0]) for r in records]
        others = [r.mean_s * 1e6 for r, d in zip(records, default, strict=True) if not d]
        found.append({
            "workload": task, "records": len(records), "best_us": round(records[0].mean_s * 1e6, 3),
            "best_is_default": default[0],
            "others_us": [round(min(others), 3), round(max(others), 3)] if others else None,
        })  # fmt: skip
    return found


def coverage(path: Path) -> dict:
    from registry.share.plain_export import plain_records
    from registry.store.factory import open_storage

    store = open_storage(f"sqlite:///{path}", create_new=False)
    device = store.all_devices()[0]
    plain = plain_records(store, device.id, json.loads(device.target_json))
    out = {
        "registry": path.name,
        "device": device.name,
        "plain_kernels": plain.kernels,
        "with_a_record": len(plain.records),
        "without": plain.unusable,
        "softmaxes": softmaxes(store, device.id),
    }
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("registries", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from bench.machine_speed import stamped

    rows = [coverage(p) for p in args.registries]
    for row in rows:
        print(json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps(stamped({"rows": rows}), indent=1))


if __name__ == "__main__":
    main()
