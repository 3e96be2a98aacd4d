"""What out-of-process measurement costs transfer: its search time now against the in-process timing it replaced.

    .venv/bin/python bench/measure/isolation.py --old-registry ../wt-old/.venv/bin/registry [--rounds 3]

``--old-registry`` is the ``registry`` command of a checkout from before the measurement interface (commit c4e7abb,
which built and timed transfer's candidates in its own process). Set one up with::

    git worktree add --detach ../wt-old c4e7abb && (cd ../wt-old && python3 -m venv .venv && .venv/bin/pip install -e .)

For each model pair of the zoo (a donor shape and a target shape of the same model), a template registry gets the
donor tuned by ``registry tune``; then ``registry transfer TARGET --tune-trials 0 --json`` runs on a fresh copy of
that registry with each version in turn, ``--rounds`` times, interleaved. Compared: ``search_s`` (donor search and
candidate measurement: what the issue's target is about), and the whole wall time. Results:
bench/results/isolation.json and the table printed at the end (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from bench.machine_speed import stamped  # noqa: E402
from bench.sqlite_copy import copy_sqlite  # noqa: E402
from registry.tvm_side import zoo  # noqa: E402

NEW = str(Path(sys.executable).with_name("registry"))
# (name, donor model, target model): the same operators at other shapes, so transfer has donors to measure.
PAIRS = [
    ("resnet18", lambda: zoo.resnet(depth=18, image=64), lambda: zoo.resnet(depth=18, image=96)),
    ("mobilenetv2", lambda: zoo.mobilenet_v2(image=64), lambda: zoo.mobilenet_v2(image=96)),
    ("bert", lambda: zoo.bert(seq=32), lambda: zoo.bert(seq=64)),
]


def run_json(args: list[str]) -> dict:
    done = subprocess.run(args, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout[done.stdout.index("{") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-registry", required=True, help="the registry command of the in-process version")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--donor-trials-per-task", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "isolation.json")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for name, donor, target in PAIRS:
            donor_path, target_path = tmp / f"{name}-donor.onnx", tmp / f"{name}-target.onnx"
            onnx.save(donor(), donor_path)
            onnx.save(target(), target_path)
            template = tmp / f"{name}.db"
            tasks = len(
                run_json([NEW, "--db", f"sqlite:///{template}", "tune", str(donor_path), "--trials", "1", "--json"])[
                    "tasks"
                ]
            )
            run_json([NEW, "--db", f"sqlite:///{template}", "tune", str(donor_path), "--trials",
                      str(tasks * args.donor_trials_per_task), "--json"])  # fmt: skip
            samples: dict[str, list[dict]] = {"in-process": [], "isolated": []}
            for r in range(args.rounds):
                for version, exe in (("in-process", args.old_registry), ("isolated", NEW)):
                    db = tmp / f"{name}-{version}-{r}.db"
                    copy_sqlite(template, db)
                    report = run_json([exe, "--db", f"sqlite:///{db}", "transfer", str(target_path), "--tune-trials",
                                       "0", "--json"])  # fmt: skip
                    samples[version].append(report)
                    print(f"{name} {version} round {r + 1}: search {report['search_s']:.2f} s, "
                          f"total {report['timings']['total_s']:.2f} s", flush=True)  # fmt: skip
            row = {"model": name, "tasks": len(samples["isolated"][0]["tasks"])}
            for version, reports in samples.items():
                row[version] = {
                    "search_s": [r["search_s"] for r in reports],
                    "total_s": [r["timings"]["total_s"] for r in reports],
                    "candidates": sum(t["candidates"] for t in reports[0]["tasks"]),
                    "transferred": reports[0]["sources"]["transferred"],
                }
            old = statistics.median(row["in-process"]["search_s"])
            new = statistics.median(row["isolated"]["search_s"])
            row["search_ratio"] = new / old
            row["total_ratio"] = statistics.median(row["isolated"]["total_s"]) / statistics.median(
                row["in-process"]["total_s"]
            )
            rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamped(rows), indent=2) + "\n")
    print(
        f"\n{'model':12} {'tasks':>5} {'cand.':>5} {'in-process s':>13} {'isolated s':>11} {'ratio':>6} "
        f"{'total ratio':>11}"
    )
    for row in rows:
        old, new = row["in-process"], row["isolated"]
        print(
            f"{row['model']:12} {row['tasks']:5} {new['candidates']:5} {statistics.median(old['search_s']):13.2f} "
            f"{statistics.median(new['search_s']):11.2f} {row['search_ratio']:6.2f} {row['total_ratio']:11.2f}"
        )


if __name__ == "__main__":
    main()
