"""``registry import``: MetaSchedule JSONDatabase logs into the registry, all or nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import tvm

from registry import hostinfo, tvmlog
from registry.errors import BadInputError
from registry.store.rows import DeviceSpec, IngestResult, RecordIn, WorkloadIn, canonical_json
from registry.store.store import Store
from registry.tvm_side.signature import workload_in
from registry.tvm_side.target import device_spec, runtime_threads


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

    Everything is parsed and checked before anything is written, so a malformed or truncated log, a record whose
    workload is missing, or a workload written by another TVM release raises BadInputError and leaves the database as
    it was. Importing the same logs twice adds nothing the second time.

    TVM's logs do not say how many runtime threads measured them nor on which CPU: ``num_threads`` (default: this
    TVM runtime's) and ``host_model`` (default: this machine's) fill that in.
    """
    threads = num_threads if num_threads is not None else runtime_threads()
    workloads: dict[tuple[str, str], WorkloadIn] = {}
    records: list[RecordIn] = []
    devices: dict[str, DeviceSpec] = {}
    for pair in tvmlog.find_logs(path):
        progress(f"reading {pair.record_file.parent}")
        idents = [_workload(w, workloads) for w in tvmlog.read_workloads(pair.workload_file)]
        for raw in tvmlog.read_records(pair.record_file):
            if raw.workload_index >= len(idents):
                raise BadInputError(
                    f"{raw.where}: refers to workload line {raw.workload_index + 1}, "
                    f"but {pair.workload_file} has {len(idents)} workload(s)"
                )
            key = canonical_json(raw.target)
            if key not in devices:
                try:
                    devices[key] = device_spec(raw.target, threads, host_model)
                except BadInputError as e:
                    raise BadInputError(f"{raw.where}: {e}") from None
            records.append(
                RecordIn(
                    workload=idents[raw.workload_index],
                    device=devices[key],
                    trace=raw.trace,
                    trace_text=canonical_json(raw.trace),
                    run_secs=raw.run_secs,
                    source="imported",
                    tool_version=hostinfo.tool_version(),
                    team=team,
                    model=model,
                )
            )
    progress(f"writing {len(workloads)} workload(s) and {len(records)} record(s)")
    return store.ingest(list(workloads.values()), records)


def _workload(raw: tvmlog.RawWorkload, seen: dict[tuple[str, str], WorkloadIn]) -> tuple[str, str]:
    """Check one logged workload and turn it into a WorkloadIn; returns its identity in this registry."""
    written_by = tvmlog.module_tvm_version(raw.mod_json)
    ours = hostinfo.tvm_version()
    if written_by is None or hostinfo.release(written_by) != ours:
        raise BadInputError(
            f"{raw.where}: workload written by TVM {written_by or 'of unknown version'}, but this registry runs "
            f"TVM {ours}; schedules and hashes do not carry across TVM releases"
        )
    try:
        mod = tvm.ir.load_json(raw.mod_json)
    except Exception as e:  # noqa: BLE001 - TVM raises many kinds for a corrupt graph
        raise BadInputError(f"{raw.where}: corrupt workload module ({type(e).__name__})") from None
    if not isinstance(mod, tvm.IRModule) or len(mod.functions) != 1:
        raise BadInputError(f"{raw.where}: a workload must be an IRModule with one PrimFunc")
    # The hash is recomputed, not trusted: it is platform-dependent, and compile-time lookups hash on this machine.
    wl = workload_in(mod, mod_json=raw.mod_json)
    seen.setdefault(wl.ident, wl)
    return wl.ident
