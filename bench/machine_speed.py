"""How fast this machine runs plain Python right now: one figure stored beside a benchmark's results.

The 2-core VMs these benchmarks run on differ from one session to the next, and drift within one: the same `registry
sync` code measured 14,200 records/s on one and 23,750 on another. A Python-bound benchmark's numbers from two
sessions can be compared only through a reference taken with them. This is that reference: the best of three runs
of a fixed workload of the kind the registry's Python does (building, serialising and hashing small records).
"""

from __future__ import annotations

import hashlib
import json
import time


def _workload() -> int:
    total = 0
    for i in range(60_000):
        record = {"id": i, "decisions": [[j, [i % 7, j]] for j in range(6)], "run_secs": [1e-6 * (i % 13)]}
        text = json.dumps(record, separators=(",", ":"))
        total += hashlib.sha256(text.encode()).digest()[0] + len(json.loads(text)["decisions"])
    return total


def python_reference_s(runs: int = 3) -> float:
    """Seconds for the fixed workload, best of ``runs``: lower is a faster machine."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        _workload()
        best = min(best, time.perf_counter() - start)
    return round(best, 3)


if __name__ == "__main__":
    print(python_reference_s())


def provenance(speed: bool = True) -> dict:
    """What every result file records beside its numbers: the machine (CPU model, cores, load, and the plain-Python
    reference above), the commit of the code measured, and the date. Numbers are comparable only with these."""
    import datetime as dt
    import os
    import platform
    import subprocess
    from pathlib import Path

    from registry import hostinfo

    root = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    machine = {"cpu": hostinfo.cpu_model(), "cores": os.cpu_count(), "load": os.getloadavg(), "os": platform.platform()}
    if speed:
        machine["python_reference_s"] = python_reference_s()
    return {
        "machine": machine,
        "commit": (commit.stdout.strip() or os.environ.get("REGISTRY_COMMIT", "unknown"))
        + (" (modified)" if dirty else ""),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def stamped(result):
    """``result`` with its ``provenance`` (see ``provenance``): a dict gets the key, each dict of a list too."""
    where = provenance()
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, dict):
            item["provenance"] = where
    return result
