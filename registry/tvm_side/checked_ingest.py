"""Writing records from outside (TVM logs, bundles, another registry) in one transaction, every record checked.

The shared loop of ``registry import`` and ``registry sync``: workloads first, then the records in batches, each batch
checked by one ``RecordChecker`` before it is written. One invalid record refuses the whole write (BadInputError
counting them and naming the first) unless ``skip_invalid``; nothing is half-written either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import Connection

from registry.errors import BadInputError
from registry.perf import paused_gc
from registry.store import ingest
from registry.store.rows import IngestResult, RecordIn, WorkloadIn
from registry.store.store import Store
from registry.tvm_side.record_check import RecordChecker
from registry.validation import Problem, Refusals

# (where it was read, for messages; the record, or why it could not be read)
Batch = Sequence[tuple[str, RecordIn | Problem]]
Progress = Callable[[int, int, str], None]


def checked_write(
    store: Store,
    workloads: Sequence[WorkloadIn],
    batches: Callable[[], Iterable[Batch]],
    *,
    checker: RecordChecker,
    skip_invalid: bool = False,
    progress: Progress | None = None,
    total: int = 0,
    after: Callable[[Connection, dict[tuple[str, str], int], IngestResult], None] | None = None,
) -> IngestResult:
    """Write ``workloads`` and every batch of ``batches()`` into ``store`` in one transaction.

    ``batches`` is called again if the transaction loses a lock race and starts over, so it must read from the start
    each time. ``after(conn, workload ids, result)`` runs last, in the same transaction (models, donors, sync state).
    ``total``: records expected, for ``progress``.
    """
    mod_json = {w.ident: w.mod_json for w in workloads}
    progress = progress or (lambda _done, _total, _what: None)

    def write(conn: Connection) -> IngestResult:
        result, refusals, seen = IngestResult(), Refusals(), 0
        ids = ingest.upsert_workloads(conn, workloads, result)
        device_ids: dict[str, int] = {}
        for batch in batches():
            seen += len(batch)
            read: list[Any] = [r for _, r in batch]
            candidates = [(i, r) for i, r in enumerate(read) if isinstance(r, RecordIn)]
            problems = checker.check([(r, mod_json[r.workload]) for _, r in candidates])
            for i, problem in zip((i for i, _ in candidates), problems, strict=True):
                if problem is not None:
                    read[i] = problem
            for (where, _), r in zip(batch, read, strict=True):
                if isinstance(r, Problem):
                    refusals.add(where, r)
            if refusals.count and not skip_invalid:
                continue  # nothing more is written; the rest is read to count what is wrong
            recs = [r for r in read if isinstance(r, RecordIn)]
            new_devices = {r.device.key: r.device for r in recs if r.device.key not in device_ids}
            device_ids.update(ingest.upsert_devices(conn, new_devices.values()))
            ingest.insert_records(conn, recs, ids, device_ids, result)
            progress(min(seen, total) if total else seen, total, f"{seen} records read")
        if refusals.count and not skip_invalid:
            raise BadInputError(f"{refusals.message(seen)}; nothing was written (--skip-invalid writes the rest)")
        result.records_skipped, result.first_skipped = refusals.count, refusals.first
        if after is not None:
            after(conn, ids, result)
        return result

    with paused_gc():
        result = store.transact(write)
    store.after_bulk_write(result.records_new)
    return result
