"""Writing records from outside (TVM logs, bundles, another registry) in one transaction, every record checked.

The shared loop of ``registry import`` and ``registry sync``: each batch is checked by one ``RecordChecker`` as it is
read, then handed to ``RegistryStorage.ingest_batches``, which writes it in the transaction that holds them all. One
invalid record refuses the whole write (BadInputError counting them and naming the first) unless ``skip_invalid``;
nothing is half-written either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from registry.errors import BadInputError
from registry.store.interface import IngestExtras, IngestResult, RecordIn, RegistryStorage, WorkloadIn
from registry.tvm_side.record_check import RecordChecker
from registry.validation import Problem, Refusals

# (where it was read, for messages; the record, or why it could not be read)
Batch = Sequence[tuple[str, RecordIn | Problem]]
Progress = Callable[[int, int, str], None]


def checked_write(
    store: RegistryStorage,
    workloads: Sequence[WorkloadIn],
    batches: Callable[[], Iterable[Batch]],
    *,
    checker: RecordChecker,
    skip_invalid: bool = False,
    progress: Progress | None = None,
    total: int = 0,
    extras: IngestExtras | None = None,
) -> IngestResult:
    """Write ``workloads`` and every batch of ``batches()`` into ``store`` in one transaction, with ``extras``.

    ``batches`` is called again if the transaction loses a lock race and starts over, so it must read from the start
    each time. ``total``: records expected, for ``progress``.
    """
    mod_json = {w.ident: w.mod_json for w in workloads}
    progress = progress or (lambda _done, _total, _what: None)
    refusals = Refusals()

    def checked() -> Iterator[list[RecordIn]]:
        nonlocal refusals
        refusals, seen = Refusals(), 0
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
            yield [r for r in read if isinstance(r, RecordIn)]
            progress(min(seen, total) if total else seen, total, f"{seen} records read")
        if refusals.count and not skip_invalid:  # raised inside the transaction: nothing is written
            raise BadInputError(f"{refusals.message(seen)}; nothing was written (--skip-invalid writes the rest)")

    result = store.ingest_batches(workloads, checked, extras)
    result.records_skipped, result.first_skipped = refusals.count, refusals.first
    return result
