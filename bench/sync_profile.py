"""One full `registry sync` of an SQLite registry into a fresh PostgreSQL database, with the CPU each side used.

    .venv/bin/python bench/sync_profile.py SOURCE.db [--pg postgresql://postgres@127.0.0.1:5432/test]

Prints the rate, then the CPU time of each thread of this process and of the PostgreSQL server's processes over the
sync (sampled every 2 s), overall and by thirds: which side is the bottleneck. Used for the A/B runs in
docs/BENCHMARKS.md ("Sync"), old and new code in turn on one source (the source of `bench/sync_bench.py`'s
first step, kept). The database is dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sync_bench import timed_sync  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(path: str) -> float:
    """User + system CPU seconds from a /proc stat file (0 when the process or thread is gone)."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def postgres_cpu_s() -> float:
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith("postgres"):
                    total += cpu_s(f"/proc/{pid}/stat")
        except OSError:
            pass
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="an SQLite registry file")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test", help="PostgreSQL admin URL")
    args = parser.parse_args()
    admin = create_engine(make_url(args.pg).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    name = f"registry_profile_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    samples: list[tuple[float, dict[str, float], float]] = []
    done = threading.Event()

    def sample() -> None:
        me = os.getpid()
        while not done.is_set():
            threads = {t: cpu_s(f"/proc/{me}/task/{t}/stat") for t in os.listdir(f"/proc/{me}/task")}
            samples.append((time.perf_counter(), threads, postgres_cpu_s()))
            done.wait(2)

    sampler = threading.Thread(target=sample, daemon=True)
    start = time.perf_counter()
    sampler.start()
    try:
        seconds, result = timed_sync(f"sqlite:///{args.source}", str(make_url(args.pg).set(database=name)))
    finally:
        done.set()
        sampler.join()
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    new = result["records_new"]
    print(f"records {new} in {seconds:.1f} s: {new / seconds:,.0f}/s")
    (t0, first, pg0), (t1, last, pg1) = samples[0], samples[-1]
    for tid, used in last.items():
        used -= first.get(tid, 0.0)
        if used > 0.5:
            print(f"thread {tid}: {used:.1f} s of CPU ({used / (t1 - t0):.0%} of a core)")
    print(f"PostgreSQL: {pg1 - pg0:.1f} s of CPU ({(pg1 - pg0) / (t1 - t0):.0%} of a core)")
    k = len(samples)
    for a, b in ((0, k // 3), (k // 3, 2 * k // 3), (2 * k // 3, k - 1)):
        (ta, pa, ga), (tb, pb, gb) = samples[a], samples[b]
        if tb > ta:
            python = sum(pb.values()) - sum(pa.values())
            print(f"  {ta - start:.0f}-{tb - start:.0f} s: this process {python / (tb - ta):.0%}, "
                  f"PostgreSQL {(gb - ga) / (tb - ta):.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
