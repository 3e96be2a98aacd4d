"""A writer process for the concurrency tests: opens the registry and commits a slice of synthetic records."""

from __future__ import annotations

import sys

from registry import testing
from registry.store.sql.store import Store


def main(url: str, worker: int, n_workloads: int, per: int) -> None:
    store = Store(url)  # on an empty database, every worker races to migrate it
    dev = testing.device()
    # Each worker writes every record of the shared workloads (overlap) and records of its own (distinct), in
    # several transactions, interleaved with the others.
    shared = [testing.record(i, j, dev) for i in range(n_workloads) for j in range(per)]
    own = [testing.record(i, 1000 + worker * per + j, dev) for i in range(n_workloads) for j in range(per)]
    wls = [testing.workload(i) for i in range(n_workloads)]
    batch = per * 2
    recs = shared[worker::2] + own + shared[(worker + 1) % 2 :: 2]
    for start in range(0, len(recs), batch):
        store.ingest(wls, recs[start : start + batch])
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
