"""``registry import``: MetaSchedule JSONDatabase logs into the registry, all or nothing."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import tvm
from sqlalchemy import Connection
from tvm.s_tir.schedule import Schedule, Trace

from registry import hostinfo, tvmlog
from registry.errors import BadInputError
from registry.perf import paused_gc
from registry.store import ingest
from registry.store.rows import DeviceSpec, IngestResult, RecordIn, WorkloadIn, canonical_json
from registry.store.store import Store
from registry.tvm_side.compat import error_line
from registry.tvm_side.signature import workload_in
from registry.tvm_side.target import device_spec, runtime_threads

BATCH = 5000


def import_logs(
    store: Store,
    path: Path,
    *,
    team: str | None = None,
    model: str | None = None,
    num_threads: int | None = None,
    host_model: str | None = None,
    progress: Callable[[str], None] = lambda _msg: None,
) -> IngestResult:
    """Read every JSONDatabase under ``path`` and add it to ``store`` in one transaction.

    Records stream from the files in batches, so a log of millions of records needs little memory; the transaction
    spans them all, so a malformed or truncated log, a record whose workload is missing, a trace that does not apply
    to its workload, or a workload written by another TVM release raises BadInputError and leaves the database as it
    was. Importing the same logs twice adds nothing the second time.

    TVM's logs do not say how many runtime threads measured them nor on which CPU: ``num_threads`` (default: this
    TVM runtime's) and ``host_model`` (default: this machine's) fill that in.
    """
    threads = num_threads if num_threads is not None else runtime_threads()
    # Workloads are few and need TVM to check: all of them first, before the transaction opens.
    logged: list[tuple[tvmlog.LogPair, list[WorkloadIn]]] = []
    modules: dict[tuple[str, str], tvm.IRModule] = {}
    for pair in tvmlog.find_logs(path):
        progress(f"checking workloads in {pair.workload_file}")
        logged.append((pair, [_workload(raw, modules) for raw in tvmlog.read_workloads(pair.workload_file)]))
    unique = list({w.ident: w for _, wls in logged for w in wls}.values())
    checker = _TraceChecker(modules)
    devices: dict[str, DeviceSpec] = {}
    last: list = [None, None]  # (target, device) of the previous record: a log rarely changes target

    def device_of(raw: tvmlog.RawRecord) -> DeviceSpec:
        if raw.target == last[0]:
            return last[1]
        key = canonical_json(raw.target)
        if key not in devices:
            try:
                devices[key] = device_spec(raw.target, threads, host_model)
            except BadInputError as e:
                raise BadInputError(f"{raw.where}: {e}") from None
        last[:] = [raw.target, devices[key]]
        return devices[key]

    def write(conn: Connection) -> IngestResult:
        # Runs again from the files' start if it loses a lock race, so nothing here may depend on an earlier try.
        result = IngestResult()
        ids = ingest.upsert_workloads(conn, unique, result)
        device_ids: dict[str, int] = {}
        for pair, workloads in logged:
            idents = [w.ident for w in workloads]
            records = tvmlog.read_records(pair.record_file)
            while batch := list(itertools.islice(records, BATCH)):
                recs = [_record(raw, idents, pair, device_of(raw), team, model, checker) for raw in batch]
                new_devices = {r.device.key: r.device for r in recs if r.device.key not in device_ids}
                device_ids.update(ingest.upsert_devices(conn, new_devices.values()))
                ingest.insert_records(conn, recs, ids, device_ids, result)
                progress(f"{result.records_new + result.records_present} records read")
        return result

    with paused_gc():
        result = store.transact(write)
    store.after_bulk_write(result.records_new)
    return result


class _TraceChecker:
    """Checks that a trace's instructions apply to its workload, once per distinct (workload, instructions).

    A log's traces share a few instruction lists (one per design space), so this costs a few schedule applications
    per import, not one per record; a garbage trace is refused here instead of failing later inside compile_relax.
    """

    def __init__(self, modules: dict[tuple[str, str], tvm.IRModule]) -> None:
        self.modules, self.seen = modules, set()

    def check(self, raw: tvmlog.RawRecord, ident: tuple[str, str]) -> str:
        """Returns the canonical JSON of the trace's instructions."""
        trace = raw.trace
        if not (isinstance(trace, list) and len(trace) == 2 and all(isinstance(p, list) for p in trace)):
            raise BadInputError(f"{raw.where}: a trace must be [instructions, decisions]")
        insts = canonical_json(trace[0])
        key = (ident, insts)
        if key in self.seen:
            return insts
        try:
            # With this record's decisions: re-sampled ones can legitimately fail (a different compute location
            # changes the loops that later instructions refer to). One real decision set per skeleton is checked.
            Trace.apply_json_to_schedule(trace, Schedule(self.modules[ident], seed=1))
        except Exception as e:  # noqa: BLE001 - TVM raises many kinds for a trace that does not fit
            reason = error_line(e)[:160]
            raise BadInputError(f"{raw.where}: the trace does not apply to its workload ({reason})") from None
        self.seen.add(key)
        return insts


def _record(raw: tvmlog.RawRecord, idents, pair, device: DeviceSpec, team, model, checker: _TraceChecker) -> RecordIn:
    if raw.workload_index >= len(idents):
        raise BadInputError(
            f"{raw.where}: refers to workload line {raw.workload_index + 1}, "
            f"but {pair.workload_file} has {len(idents)} workload(s)"
        )
    ident = idents[raw.workload_index]
    return RecordIn(
        workload=ident,
        device=device,
        trace=raw.trace,
        insts_json=checker.check(raw, ident),
        run_secs=raw.run_secs,
        source="imported",
        tool_version=hostinfo.tool_version(),
        team=team,
        model=model,
    )


def _workload(raw: tvmlog.RawWorkload, modules: dict[tuple[str, str], tvm.IRModule]) -> WorkloadIn:
    """Check one logged workload and turn it into what the store keeps (its module goes into ``modules``)."""
    try:
        written_by = tvmlog.module_tvm_version(raw.mod_json)
    except ValueError as e:
        raise BadInputError(f"{raw.where}: corrupt workload payload ({e})") from None
    ours = hostinfo.tvm_version()
    if written_by is None or hostinfo.release(written_by) != ours:
        raise BadInputError(
            f"{raw.where}: workload written by TVM {written_by or 'of unknown version'}, but this registry runs "
            f"TVM {ours}; schedules and hashes do not carry across TVM releases"
        )
    try:
        mod = tvm.ir.load_json(raw.mod_json)
        if not isinstance(mod, tvm.IRModule) or len(mod.functions) != 1:
            raise ValueError("not an IRModule with one function")
        if not isinstance(next(iter(mod.functions.values())), tvm.tirx.PrimFunc):
            raise ValueError("its function is not a PrimFunc")
        # The hash is recomputed, not trusted: it is platform-dependent, and compile-time lookups hash here.
        wl = workload_in(mod, mod_json=raw.mod_json)
    except Exception as e:  # noqa: BLE001 - TVM raises many kinds for a corrupt graph
        reason = str(e).strip()[:120] or type(e).__name__
        raise BadInputError(f"{raw.where}: corrupt workload module ({reason})") from None
    modules.setdefault(wl.ident, mod)
    return wl
