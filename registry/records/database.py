"""``RegistryDatabase``: MetaSchedule's database interface over the registry, bound to one device.

``tune_relax(..., database=RegistryDatabase(target))`` writes every measured record straight into the registry;
``compile_relax(RegistryDatabase(target), ...)`` reads the best record *for that device*. TVM's own databases ignore
the target when they answer, so logs from two machines silently mix; here the device is part of every query.
Where it answers otherwise than TVM's ``JSONDatabase`` and ``MemoryDatabase``, the class's docstring lists it
(``tests/test_tvm_database_contract.py`` runs TVM's own database tests against it).
"""

from __future__ import annotations

import itertools
import json
import logging
import warnings
from typing import Any

import tvm
import tvm_ffi
from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import PyDatabase, TuningRecord, Workload
from tvm.target import Target

from registry import hostinfo
from registry.errors import BadInputError, RegistryError, RegistryWarning
from registry.options import whole
from registry.records.write import RecordWriter
from registry.store.factory import open_storage
from registry.store.interface import Catalogue, DeviceSpec, RecordIn, RegistryStorage, StoredRecord
from registry.store.rows import SOURCES
from registry.store.urls import redact
from registry.store.validation import name_problem, trace_is_sound
from registry.tvm_side import tvmlog
from registry.tvm_side.compat import TVM_ERRORS, error_line
from registry.tvm_side.signature import plain_json, structural_hash, workload_in
from registry.tvm_side.target import canonical_target, device_spec

_MODE = "structural"
SPARE_RECORDS = 2  # read beyond top_k, to stand in for records that cannot be used
log = logging.getLogger(__name__)


@tvm_ffi.register_error
class RecordRefusedError(BadInputError, ValueError):
    """A record ``RegistryDatabase.commit_tuning_record`` did not store, and why.

    MetaSchedule calls the database through TVM's FFI, which re-raises an exception of a class it does not know as a
    bare ``RuntimeError``; registered with the FFI, this one reaches the caller as itself: a ``ValueError`` for code
    that knows TVM, a ``RegistryError`` (one ``Error:`` line) for the registry's own callers."""


def check_provenance(source: Any, team: Any, model: Any, num_threads: Any = None) -> None:
    """Raises BadInputError for provenance that every commit would refuse its record for (one line now, not a
    refusal per record after a whole tuning run), or a thread count that would name a device "2.5t"."""
    problem = (
        name_problem(team, "team")
        or name_problem(model, "model name")
        or (None if source in SOURCES else f"source {source!r}: expected one of {', '.join(SOURCES)}")
    )
    if problem:
        raise BadInputError(problem)
    whole("num_threads", num_threads, 1, optional=True)


@derived_object
class RegistryDatabase(PyDatabase):
    """A MetaSchedule database that stores into, and answers from, the registry for one device.

    Parameters
    ----------
    target:
        The TVM target measured on; with ``num_threads`` and this machine's fingerprint it names the device.
    store:
        A ``RegistryStorage`` (such as a ``Store``) or a database URL (default: the configured registry).
    num_threads:
        The runtime thread count the records are measured with (default: ``$TVM_NUM_THREADS``, else TVM's).
    device:
        The device exactly, as a measurer describes the one it measures on; overrides ``num_threads`` and this
        machine's fingerprint (records measured on an RPC server are filed under the server's device).
    source, team, model:
        Provenance written on every committed record.
    task_names:
        Optional structural hash -> task name, from ``extract_tasks``; MetaSchedule does not pass names to databases.

    Where it differs from TVM's ``JSONDatabase`` and ``MemoryDatabase`` (each deliberate; TVM's own database tests,
    re-expressed in ``tests/test_tvm_database_contract.py``, check these):

    - One record per schedule (trace) and device. A schedule committed again is not appended: the faster
      measurement (lower mean; any successful one beats a failed one) is kept, and a slower one is logged at INFO
      on ``registry.records.database`` and dropped. TVM appends every commit and answers with the fastest, so
      ``get_top_k(wl, 1)`` agrees; ``get_top_k(wl, k)`` never lists a schedule twice, and ``len()`` counts
      schedules, not commits.
    - A record the registry cannot accept raises ``RecordRefusedError`` (a ``ValueError``, and a
      ``RegistryError``), with what was refused and why, and nothing is stored: latencies that are not measurements
      (0 or below, above 3600 s, not finite, or a failed run's 1e9/1e10 mixed with real times), a trace with no
      instructions (such as the empty trace of an unscheduled module), a trace that does not replay exactly on its
      workload, a target other than this database's device's. TVM stores anything.
    - Records are answered for this database's device only (target, runtime threads, machine, TVM release): a
      record committed through a database of another device is not returned. TVM ignores the target.
    - Workloads are keyed by structural hash (``module_equality="structural"``); TVM's ``"ignore-tensor"`` and
      ``"anchor-block"`` equalities are not offered.
    - Failed records (latencies of 1e9 s and up, or none) are stored and counted by ``len()``, but ``get_top_k``
      never returns one, as TVM's ``get_top_k`` does not.
    """

    def __init__(
        self,
        target: Target | dict | str,
        store: RegistryStorage | str | None = None,
        *,
        num_threads: int | None = None,
        device: DeviceSpec | None = None,
        source: str = "tuned",
        team: str | None = None,
        model: str | None = None,
        task_names: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        check_provenance(source, team, model, num_threads)  # before the device row is written
        self.store = open_storage(store) if store is None or isinstance(store, str) else store
        self.device = device or device_spec(target, num_threads)
        self.device_id = self.store.add_device(self.device)
        self._generic = _generic_twins(self.store, self.device)
        self.provenance = dict(source=source, team=team, model=model, host=hostinfo.hostname())
        self.task_names = dict(task_names or {})
        # shash -> (workload row id, TVM Workload, args_info): each module is loaded or committed once per process.
        self._workloads: dict[str, tuple[int, Workload, list[Any]]] = {}
        self._checked_targets: set[str] = set()
        self._writer: RecordWriter | None = None  # made on the first commit: compiling only reads, and starts no worker

    @property
    def target(self) -> Target:
        """The target of this database's device: what to tune and compile with (``tune_relax(mod, params,
        db.target, ...)``), so that every record lands under this one device."""
        return Target(self.device.target)

    # -- workloads ----------------------------------------------------------------------------------------------

    def _known(self, mod: IRModule, shash: str) -> tuple[int, Workload, list[Any]] | None:
        if shash in self._workloads:
            return self._workloads[shash]
        wid = self.store.workload_ids([(shash, _MODE)]).get((shash, _MODE))
        stored = self.store.workloads_by_id([wid]).get(wid) if wid is not None else None
        if stored is None:
            return None
        workload = Workload.from_json([shash, tvmlog.encode_module(stored.mod_json)])
        if not tvm_ffi.structural_equal(workload.mod, mod):
            raise RegistryError(
                f"structural hash {shash} names two different workloads; this registry keys workloads by that "
                "hash, so this one cannot be stored"
            )
        self._workloads[shash] = (wid, workload, stored.args_info)
        return self._workloads[shash]

    def has_workload(self, mod: IRModule) -> bool:
        return self._known(mod, structural_hash(mod)) is not None

    def commit_workload(self, mod: IRModule) -> Workload:
        shash = structural_hash(mod)
        known = self._known(mod, shash)
        if known is None:
            self.store.ingest([workload_in(mod, task_name=self.task_names.get(shash))], [])
            known = self._known(mod, shash)
        return known[1]

    # -- records ------------------------------------------------------------------------------------------------

    def commit_tuning_record(self, record: TuningRecord) -> None:
        """Store one measured record. It is validated like an imported one (``RecordValidator``): a record whose
        latencies are not measurements, or whose trace TVM does not replay exactly on its workload, raises
        ``RecordRefusedError`` and nothing is stored. A schedule this device already has keeps the faster of its two
        measurements (see the class's docstring)."""
        shash = structural_hash(record.workload.mod)
        self._check_target(record.target, shash)
        if shash not in self._workloads:
            self.commit_workload(record.workload.mod)
        run_secs = tuple(float(s) for s in record.run_secs) if record.run_secs is not None else ()
        trace = plain_json(record.trace.as_json())
        rec = RecordIn(
            workload=(shash, _MODE),
            device=self.device,
            trace=trace,
            run_secs=run_secs,
            tool_version=hostinfo.tool_version(),
            **self.provenance,
        )
        if self._writer is None:
            self._writer = RecordWriter(self.store, faster_replaces=True)
        # The trace names the blocks of MetaSchedule's copy of the workload, which may not be the stored copy's.
        incoming = {rec.workload: str(tvm.ir.save_json(record.workload.mod))}
        written = self._writer.write([rec], incoming)
        if written.refused:
            raise self._refused(shash, written.refused[0][1].reason)
        if written.result.records_present:
            # Not silent: a MetaSchedule user expects every commit to count, as it does in TVM's databases.
            mean = f"mean {rec.mean_s:.3g} s" if rec.mean_s is not None else "a failed run"
            what = "replaced its stored latencies" if written.replaced else "was not faster than stored: dropped"
            log.info("%s: a schedule of workload %s measured again (%s) %s", self._where(), shash, mean, what)

    def _where(self) -> str:
        return f"the registry at {redact(self.store.url)}, device {self.device.name}"

    def _refused(self, shash: str, reason: str) -> RecordRefusedError:
        name = self.task_names.get(shash)
        return RecordRefusedError(
            f"{self._where()}, refused a tuning record of workload {shash}{f' ({name})' if name else ''}: {reason}; "
            "nothing was stored"
        )

    def _check_target(self, target: Target | None, shash: str) -> None:
        """A record measured for another target must not be filed under this device."""
        text = str(target) if target is not None else ""
        if text in self._checked_targets:
            return
        if target is not None and canonical_target(target) != self.device.target:
            raise self._refused(
                shash,
                f"it was measured for target {text}, and this database files records for "
                f"{self.device.target_json}; tune with the target the database was made for (its .target)",
            )
        self._checked_targets.add(text)

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        known = self._known(workload.mod, structural_hash(workload.mod))
        if known is None or top_k <= 0:
            return []
        wid, wl, args = known
        # A few more than asked for: a record that cannot be used (see _record) leaves its place to the next best.
        # Then this machine's records tuned for a generic CPU (see _generic_twins), after the device's own.
        stored = itertools.chain(
            self.store.top_k(wid, self.device_id, top_k + SPARE_RECORDS),
            *(self.store.top_k(wid, twin, top_k + SPARE_RECORDS) for twin in self._generic),
        )
        usable = (t for t in (self._record(r, wl, args) for r in stored) if t is not None)
        return list(itertools.islice(usable, top_k))

    def get_all_tuning_records(self) -> list[TuningRecord]:
        with self.store.device_records(self.device_id) as found:
            stored, workloads = list(found.records), found.workloads
        tvm_workloads = {
            wid: Workload.from_json([w.shash, tvmlog.encode_module(w.mod_json)]) for wid, w in workloads.items()
        }
        records = (self._record(r, tvm_workloads[r.workload_id], workloads[r.workload_id].args_info) for r in stored)
        return [t for t in records if t is not None]

    def _record(self, r: StoredRecord, workload: Workload, args_info: list[Any]) -> TuningRecord | None:
        """The stored record as TVM's, or None, with one warning naming it, for a record compilation cannot use.

        ``TuningRecord.from_json`` replays the trace on the workload, and every reader (compilation's query, the
        search's seeding) comes through here: a record that does not replay is skipped, and the next best one, or
        TVM's default schedule, is used instead of the whole compilation ending in a TVM check failure. A trace
        that is not sound is never handed to it: it writes each decision to the index it names without a bounds
        check."""
        trace = _trace(r)
        if trace is not None:
            try:
                return TuningRecord.from_json([trace, r.run_secs, self.device.target, args_info], workload)
            except TVM_ERRORS as e:
                why = f"does not replay on its workload ({error_line(e)[:160]})"
        else:
            why = "holds a trace that is not sound"
        warnings.warn(
            f"record {r.id} {why}; it is skipped (`registry check` marks such records)", RegistryWarning, stacklevel=3
        )
        return None

    def __len__(self) -> int:
        return self.store.count_records(self.device_id)


def _generic_twins(store: Catalogue, device: DeviceSpec) -> list[int]:
    """For a CPU device whose target names its mcpu: the devices of the same machine (CPU, runtime threads, cores,
    TVM release) whose target names none, which is how plain TVM tunes by default and what an imported log of this
    machine then holds. Their records are usable here (a schedule's code does not depend on the mcpu it was timed
    under), and rank after the device's own records whatever their latency, which was measured by other code."""
    target = device.target
    if target.get("kind") != "llvm" or not target.get("mcpu"):
        return []
    twins = []
    for row in store.all_devices():
        try:
            theirs = json.loads(row.target_json)
        except ValueError:
            continue
        same_machine = (row.host_model, row.num_threads, row.tvm_version) == (
            device.host_model, device.num_threads, device.tvm_version)  # fmt: skip
        if same_machine and theirs.get("kind") == "llvm" and not theirs.get("mcpu") and (
            theirs.get("num-cores") == target.get("num-cores") and theirs.get("mtriple") == target.get("mtriple")
        ):  # fmt: skip
            twins.append(row.id)
    return twins


def _trace(r: StoredRecord) -> list | None:
    """A stored record's trace, if it is sound to hand to TVM (``validation.trace_is_sound``)."""
    try:
        trace = json.loads(r.trace_json)
    except (ValueError, RecursionError):
        return None
    return trace if trace_is_sound(trace) else None
