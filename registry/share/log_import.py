"""``registry import``: MetaSchedule JSONDatabase logs into the registry, all or nothing."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tvm

from registry import hostinfo
from registry.errors import BadInputError
from registry.records.validator import RecordValidator
from registry.records.write import checked_write
from registry.store.interface import DeviceSpec, IngestResult, RecordIn, RecordStorage, WorkloadIn
from registry.store.rows import LOG_ORIGIN, canonical_json
from registry.store.validation import Problem
from registry.tvm_side import tvmlog
from registry.tvm_side.signature import workload_in
from registry.tvm_side.target import device_spec, runtime_threads

BATCH = 5000


def import_logs(
    store: RecordStorage,
    path: Path,
    *,
    team: str | None = None,
    model: str | None = None,
    num_threads: int | None = None,
    host_model: str | None = None,
    skip_invalid: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
) -> IngestResult:
    """Read every JSONDatabase under ``path`` and add it to ``store`` in one transaction.

    Records stream from the files in batches, so a log of millions of records needs little memory; the transaction
    spans them all, so a malformed or truncated log, or a workload written by another TVM release, raises
    BadInputError and leaves the database as it was. Importing the same logs twice adds nothing the second time.

    Every record is validated against its workload before its batch is written (``RecordValidator``: latencies,
    target, and a trace TVM replays exactly). Invalid records refuse the whole import with one BadInputError that
    counts them and names the first; with ``skip_invalid`` the others are imported and the result counts the skipped.

    TVM's logs do not say how many runtime threads measured them nor on which CPU: ``num_threads`` (default: this
    TVM runtime's) and ``host_model`` (default: this machine's) fill that in.

    ``progress(records read, records in the logs, what)``: the logs' lines are counted first for it (a fast byte
    scan), and only when it is given.
    """
    threads = num_threads if num_threads is not None else runtime_threads()
    validator = RecordValidator()
    validator.pool.start()  # a replay worker's TVM import, overlapping the reading of the workloads
    # Workloads are few and need TVM to check: all of them first, before the transaction opens.
    logged: list[tuple[tvmlog.LogPair, list[WorkloadIn]]] = []
    pairs = list(tvmlog.find_logs(path))
    lines = sum(_count_lines(p.record_file) for p in pairs) if progress is not None else 0
    progress = progress or (lambda _done, _total, _what: None)
    for pair in pairs:
        progress(0, lines, f"checking workloads in {pair.workload_file.name}")
        logged.append((pair, [_workload(raw) for raw in tvmlog.read_workloads(pair.workload_file)]))
    unique = list({w.ident: w for _, wls in logged for w in wls}.values())
    devices = _Devices(threads, host_model)  # like the validator, outside write(): what they learned survives a retry

    def batches():
        # Read again from the files' start if the write loses a lock race: nothing may depend on an earlier try.
        for pair, workloads in logged:
            idents = [w.ident for w in workloads]
            records = tvmlog.read_records(pair.record_file)
            while batch := list(itertools.islice(records, BATCH)):
                yield [(raw.where, _record(raw, idents, pair, devices, team, model)) for raw in batch]

    return checked_write(
        store, unique, batches, validator=validator, skip_invalid=skip_invalid, progress=progress, total=lines
    )


def _count_lines(file: Path) -> int:
    """Lines in ``file``, 0 if it cannot be read (reading it for real says why)."""
    try:
        with open(file, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


class _Devices:
    """The device of each logged target, built once per distinct target (a log rarely changes target)."""

    def __init__(self, threads: int, host_model: str | None) -> None:
        self.threads, self.host_model = threads, host_model
        self._by_target: dict[str, DeviceSpec | Problem] = {}
        self._last: tuple[Any, DeviceSpec | Problem] | None = None

    def of(self, target: dict[str, Any]) -> DeviceSpec | Problem:
        if self._last is not None and self._last[0] == target:
            return self._last[1]
        key = canonical_json(target)
        if key not in self._by_target:
            try:
                self._by_target[key] = device_spec(target, self.threads, self.host_model)
            except BadInputError as e:
                self._by_target[key] = Problem(str(e), trace=False)
        self._last = (target, self._by_target[key])
        return self._by_target[key]


def _record(raw: tvmlog.RawRecord, idents, pair, devices: _Devices, team, model) -> RecordIn | Problem:
    if raw.workload_index >= len(idents):
        return Problem(
            f"refers to workload line {raw.workload_index + 1}, but {pair.workload_file} has {len(idents)} workload(s)",
            trace=False,
        )
    device = devices.of(raw.target)
    if isinstance(device, Problem):
        return device
    trace = raw.trace
    insts = trace[0] if isinstance(trace, list) and trace else None
    insts_json = raw.insts_json or (canonical_json(insts) if isinstance(insts, list) else "")
    return RecordIn(
        workload=idents[raw.workload_index],
        device=device,
        trace=trace,
        insts_json=insts_json,  # serialized once (once per instruction list the reader knew), for checks and write
        run_secs=raw.run_secs,
        source="imported",
        tool_version=hostinfo.tool_version(),
        team=team,
        model=model,
        origin=LOG_ORIGIN,
    )


def _workload(raw: tvmlog.RawWorkload) -> WorkloadIn:
    return checked_workload(raw.where, raw.mod_json)


def checked_workload(where: str, mod_json: str) -> WorkloadIn:
    """Check one workload from outside (``where`` names it in errors) and turn it into what the store keeps."""
    try:
        written_by = tvmlog.module_tvm_version(mod_json)
    except ValueError as e:
        raise BadInputError(f"{where}: corrupt workload payload ({e})") from None
    ours = hostinfo.tvm_version()
    if written_by is None or hostinfo.release(written_by) != ours:
        raise BadInputError(
            f"{where}: workload written by TVM {written_by or 'of unknown version'}, but this registry runs "
            f"TVM {ours}; schedules and hashes do not carry across TVM releases"
        )
    try:
        mod = tvm.ir.load_json(mod_json)
        if not isinstance(mod, tvm.IRModule) or len(mod.functions) != 1:
            raise ValueError("not an IRModule with one function")
        if not isinstance(next(iter(mod.functions.values())), tvm.tirx.PrimFunc):
            raise ValueError("its function is not a PrimFunc")
        # The hash is recomputed, not trusted: it is platform-dependent, and compile-time lookups hash here.
        wl = workload_in(mod, mod_json=mod_json)
    except Exception as e:  # noqa: BLE001 - TVM raises many kinds for a corrupt graph
        reason = str(e).strip()[:120] or type(e).__name__
        raise BadInputError(f"{where}: corrupt workload module ({reason})") from None
    return wl
