"""The one door through which records reach a registry: each is checked against the module stored for its workload.

Every write path comes through here: ``registry import``, bundles, ``registry sync`` and ``pull`` (``checked_write``,
in batches, in one transaction), and tuning, transfer and ``RegistryDatabase.commit_tuning_record``
(``RecordWriter``, a few records at a time). ``tests/test_write_paths.py`` fails on a write that goes around it.

A record is checked by ``RecordValidator`` against the module **the registry stores** for its workload, which is the
one compilation and every later reader will apply it to. That may be another model's copy of the workload: the
structural hash that keys workloads ignores block names, while traces name blocks. A record made on a copy whose
names differ is moved onto the stored copy first (``registry.records.rebase``); one that still does not replay there
is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from registry.errors import BadInputError
from registry.records.rebase import rebased, renaming
from registry.records.validator import RecordValidator
from registry.store.interface import Ident, IngestExtras, IngestResult, RecordIn, RecordReads, RecordStorage, WorkloadIn
from registry.store.rows import canonical_json
from registry.store.validation import Problem, Refusals

# (where it was read, for messages; the record, or why it could not be read)
Batch = Sequence[tuple[str, RecordIn | Problem]]
Progress = Callable[[int, int, str], None]

_NOT_PAIRED = Problem("its workload's module and the registry's copy of that workload do not pair up block for block")


class _Modules:
    """Per workload: the module JSON records are checked against (the stored one, else the incoming one) and the
    block renaming from the incoming copy onto it (None where none exists)."""

    def __init__(self, store: RecordReads, incoming: dict[Ident, str]) -> None:
        self.store, self.incoming = store, incoming
        self.checked_on: dict[Ident, str] = {}
        self.names: dict[Ident, dict[str, str] | None] = {}

    def learn(self, idents: Iterable[Ident]) -> None:
        todo = [i for i in set(idents) if i not in self.checked_on]
        if not todo:
            return
        ids = self.store.workload_ids(todo)
        stored = self.store.workloads_by_id(sorted(set(ids.values()))) if ids else {}
        for ident in todo:
            mine = self.incoming.get(ident)
            if ident in ids and ids[ident] not in stored:  # stored, but its row cannot be read (a warning said so)
                self.checked_on[ident], self.names[ident] = "", None
                continue
            theirs = stored[ids[ident]].mod_json if ident in ids else None
            self.checked_on[ident] = theirs or mine or ""
            self.names[ident] = {} if theirs is None or mine is None else renaming(mine, theirs)

    def moved(self, record: RecordIn) -> RecordIn | Problem:
        """The record as it applies to the module it is checked on."""
        if not self.checked_on.get(record.workload):
            if record.workload in self.names:
                return Problem("the registry's copy of its workload cannot be read (`registry check` says more)")
            return Problem("its workload is neither in the registry nor written with it")
        names = self.names[record.workload]
        if names is None:
            return _NOT_PAIRED
        if not names:
            return record
        try:
            trace = rebased(record.trace, names)
        except (TypeError, ValueError):
            return record  # not a trace of TVM's shape: the validator says what is wrong with it
        return dataclasses.replace(record, trace=trace, insts_json=canonical_json(trace[0]))


@dataclass
class Written:
    """What ``RecordWriter.write`` stored, and what it refused, with why."""

    result: IngestResult
    refused: list[tuple[RecordIn, Problem]] = field(default_factory=list)
    # Of the records already stored (``result.records_present``), those whose faster measurement replaced the stored
    # one (``faster_replaces``).
    replaced: int = 0


class RecordWriter:
    """Writes records made here (tuning, transfer, a MetaSchedule database commit): those that replay on their
    stored workload are stored, the others are refused and returned with the reason. Keeps what its validator learned
    for the records that follow.

    ``faster_replaces``: a record whose schedule this registry already measured on its device replaces the stored
    latencies where it is faster (``RegistryStorage.keep_faster``), as TVM's own databases, which keep every commit,
    answer with the fastest; without it, the stored measurement stays and the new one is only counted present."""

    def __init__(
        self, store: RecordStorage, validator: RecordValidator | None = None, *, faster_replaces: bool = False
    ) -> None:
        self.store = store
        self.validator = validator or RecordValidator()
        self.faster_replaces = faster_replaces
        self._modules = _Modules(store, {})

    def write(self, records: Sequence[RecordIn], incoming: dict[Ident, str] | None = None) -> Written:
        """``incoming``: the module each record was made on, where it may not be the stored one (e.g. MetaSchedule's
        task module), so that its trace is moved onto the stored copy first."""
        for ident, mod_json in (incoming or {}).items():
            if self._modules.incoming.get(ident) != mod_json:  # the renaming depends on the module it came with
                self._modules.incoming[ident] = mod_json
                self._modules.checked_on.pop(ident, None)
        self._modules.learn(r.workload for r in records)
        moved = [self._modules.moved(r) for r in records]
        todo = [(i, m) for i, m in enumerate(moved) if isinstance(m, RecordIn)]
        problems = self.validator.validate([(m, self._modules.checked_on[m.workload]) for _, m in todo])
        for (i, _), problem in zip(todo, problems, strict=True):
            if problem is not None:
                moved[i] = problem
        good = [m for m in moved if isinstance(m, RecordIn)]
        result = self.store.ingest_batches([], lambda: [good]) if good else IngestResult()
        # Validated above like the new ones: the stored row changes only its latencies, to those of the same trace.
        replaced = sum(self.store.keep_faster(good)) if self.faster_replaces and result.records_present else 0
        return Written(
            result, [(r, m) for r, m in zip(records, moved, strict=True) if isinstance(m, Problem)], replaced
        )


def checked_write(
    store: RecordStorage,
    workloads: Sequence[WorkloadIn],
    batches: Callable[[], Iterable[Batch]],
    *,
    validator: RecordValidator,
    skip_invalid: bool = False,
    progress: Progress | None = None,
    total: int = 0,
    extras: IngestExtras | None = None,
) -> IngestResult:
    """Write ``workloads`` and every batch of ``batches()`` into ``store`` in one transaction, with ``extras``.

    ``batches`` is called again if the transaction loses a lock race and starts over, so it must read from the start
    each time. ``total``: records expected, for ``progress``.
    """
    modules = _Modules(store, {w.ident: w.mod_json for w in workloads})
    modules.learn(modules.incoming)
    progress = progress or (lambda _done, _total, _what: None)
    refusals = Refusals()

    def checked() -> Iterator[list[RecordIn]]:
        nonlocal refusals
        refusals, seen, moved = Refusals(), 0, {}
        for batch in batches():
            seen += len(batch)
            read: list[Any] = [r for _, r in batch]
            for i, r in enumerate(read):
                if isinstance(r, RecordIn):
                    read[i] = modules.moved(r)
                    if read[i] is not r and isinstance(read[i], RecordIn):
                        moved[id(r)] = read[i]
            candidates = [(i, r) for i, r in enumerate(read) if isinstance(r, RecordIn)]
            problems = validator.validate([(r, modules.checked_on[r.workload]) for _, r in candidates])
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
            raise BadInputError(
                f"{refusals.message(seen)}; nothing was written", cli_hint="--skip-invalid writes the rest"
            )
        if extras is not None and moved:  # donor links name records by what is stored: the moved ones
            extras.donors[:] = [(moved.get(id(r), r), d) for r, d in extras.donors]

    result = store.ingest_batches(workloads, checked, extras)
    result.records_skipped, result.first_skipped = refusals.count, refusals.first
    return result
