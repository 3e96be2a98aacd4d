"""``registry check``: every stored record replayed on its stored workload; those that do not replay marked unusable.

A registry written before every write path checked its records (tuning and transfer did not) can hold records whose
traces do not replay on the workload they are filed under: compilation then ends with a TVM check failure, or
(since it skips them) falls back to a default schedule. This finds them with the same check a write uses
(``RecordValidator``: one replay per distinct instruction list, in worker processes) and marks them "disputed", which
no reader uses, in one transaction. No TVM in this process.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from registry.records.validator import RecordValidator
from registry.store.decode import device_spec
from registry.store.interface import DeviceSpec, RecordIn, RegistryStorage, StoredRecord
from registry.store.validation import Problem
from registry.store.values import StoredWorkload, Verdict

CHUNK = 5000  # records checked together: the validator's replays of one chunk run side by side
Progress = Callable[[int, int, str], None]


@dataclass
class AuditResult:
    checked: int = 0
    not_replaying: dict[str, int] = field(default_factory=dict)  # device name -> records that do not replay
    first: str | None = None  # "record ID (device): why" of the first that does not
    marked: bool = False  # whether they were marked disputed (not with dry_run)
    seconds: float = 0.0

    @property
    def bad(self) -> int:
        return sum(self.not_replaying.values())


def audit(
    store: RegistryStorage,
    device: str | None = None,
    *,
    dry_run: bool = False,
    progress: Progress = lambda _done, _total, _what: None,
) -> AuditResult:
    """Check every record of the devices matching ``device`` (None: all). Raises UnknownDeviceError when none match.
    Unless ``dry_run``, the records that do not replay are marked disputed in one transaction."""
    start = time.perf_counter()
    rows = store.resolve_devices(device) if device is not None else store.all_devices()
    total = sum(store.count_records(row.id) for row in rows)
    validator, result, verdicts = RecordValidator(), AuditResult(), []
    for row in rows:
        spec = device_spec(row)
        with store.device_records(row.id, unsound=True) as found:
            records = iter(found.records)
            while chunk := list(itertools.islice(records, CHUNK)):
                progress(result.checked, total, row.name)
                for r, problem in zip(chunk, _check(validator, chunk, found.workloads, spec), strict=True):
                    if problem is None:
                        continue
                    result.not_replaying[row.name] = result.not_replaying.get(row.name, 0) + 1
                    result.first = result.first or f"record {r.id} ({row.name}): {problem.reason}"
                    verdicts.append(Verdict(r.id, r.workload_id, row.id, "disputed", None))
                result.checked += len(chunk)
    progress(total, total, "done")
    if verdicts and not dry_run:
        store.record_verdicts(verdicts, dt.datetime.now(dt.timezone.utc))
        result.marked = True
    result.seconds = time.perf_counter() - start
    return result


def _check(
    validator: RecordValidator, chunk: list[StoredRecord], workloads: dict[int, StoredWorkload], spec: DeviceSpec
) -> list[Problem | None]:
    items, problems = [], [None] * len(chunk)
    for i, r in enumerate(chunk):
        if r.problem is not None:  # its row cannot be used at all (registry.store.decode)
            problems[i] = Problem(r.problem)
            continue
        w = workloads[r.workload_id]
        trace = json.loads(r.trace_json)
        record = RecordIn((w.shash, w.module_equality), spec, trace, tuple(r.run_secs), "tuned", "")
        items.append((i, record, w.mod_json))
    for (i, _, _), problem in zip(items, validator.validate([(rec, m) for _, rec, m in items]), strict=True):
        problems[i] = problem
    return problems
