"""``registry verify``: re-measure imported records on this machine, and mark each verified or disputed.

An imported record's latency is a claim (TVM's ``validate_database.py`` re-runs a database's records for the same
reason). For each imported record of a device this machine can measure, best-first (``registry.store.sql.verdicts``):

1. its trace is applied to its workload, built and timed in the measurer's worker processes (never here: a stored
   trace is unvouched-for input to TVM, and a crash costs one worker and that record), with every slot busy: a quick
   pass whose timings are upper bounds, since interference only slows a kernel down. On a CPU each worker builds its
   record in memory; for a GPU, which times one kernel at a time, the builder's processes build them first on every
   CPU core;
2. a record the quick pass finds slower than ``claimed x tolerance`` (or that failed to run) is timed again, alone
   and precisely, up to ``RECHECKS`` times (once when that timing is still ``FAR`` tolerances off), and its fastest
   timing counts: interference only slows kernels down, so a neighbour's noise does not dispute an honest record;
3. it is "verified" when the measured mean is within ``claimed x tolerance``, else "disputed", as is a record that
   does not build or run. Trust, the measured mean and the time are written batch by batch, each batch in one
   transaction that also chooses its pairs' best records again.

Records of devices this machine cannot measure (another CPU, thread count or TVM release) are left, and counted.
"""

from __future__ import annotations

import datetime as dt
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tvm
from tvm.target import Target

from registry import hostinfo
from registry.errors import BadInputError, RegistryError
from registry.measure.builder import PersistentBuilder
from registry.measure.jobs import artifact_job, kernel_arguments, traced_job
from registry.measure.measurer import Measurer
from registry.measure.types import KernelJob, Measurement, failed
from registry.store.decode import parse
from registry.store.interface import DeviceRow, RegistryStorage
from registry.store.values import Claim, Verdict

TOLERANCE = 1.5  # measured up to 1.5x the claim is verified: timing noise and a busy machine stay below it
BATCH = 64  # records built and measured together; each batch's verdicts are committed in one transaction
MAX_CLAIM_S = 3600.0  # a claimed latency verify will judge: an hour, far above any kernel
RECHECKS = 2  # precise timings, at most, of a record the quick pass found slower than tolerated
# A record still FAR x tolerance slower than claimed when timed alone is not being slowed by a neighbour (one sharing
# its core makes it about 2x slower): it is not timed a second time.
FAR = 3.0

Progress = Callable[[int, int, str], None]


@dataclass
class RecordResult:
    record_id: int
    workload: str  # structural hash
    task: str
    claimed_us: float
    measured_us: float | None
    verdict: str  # "verified" or "disputed"
    reason: str | None  # why disputed

    @property
    def ratio(self) -> float | None:
        return self.measured_us / self.claimed_us if self.measured_us is not None and self.claimed_us else None


@dataclass
class VerifyResult:
    devices: list[str] = field(default_factory=list)  # the devices verified here
    records: list[RecordResult] = field(default_factory=list)
    # imported records of matching devices this machine cannot measure, by device name
    left_elsewhere: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def count(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.records)

    @property
    def records_per_s(self) -> float:
        return len(self.records) / self.seconds if self.seconds > 0 else 0.0


def judge(claimed_s: float, m: Measurement, tolerance: float) -> tuple[str, str | None]:
    """The verdict on one record and, when disputed, why."""
    if not m.ok:
        what = m.error or "no timing came back"
        if what.startswith("build failed: "):
            return "disputed", "failed to build: " + what.removeprefix("build failed: ")
        if what.startswith("its trace"):
            return "disputed", what
        return "disputed", "failed to run: " + what.removeprefix("run failed: ")
    ratio = m.mean_us / (claimed_s * 1e6)
    if not ratio <= tolerance:  # written so that a NaN, from either side, disputes rather than verifies
        return "disputed", f"{ratio:.1f}x slower than claimed"
    return "verified", None


def verify(
    store: RegistryStorage,
    device: str = "host",
    *,
    model: str | None = None,
    limit: int | None = None,
    tolerance: float = TOLERANCE,
    progress: Progress = lambda _done, _total, _what: None,
) -> VerifyResult:
    """Verify the imported records of the devices matching ``device`` (``host``, an id or a name); see the module
    docstring. Raises UnknownDeviceError when no device matches."""
    if not (math.isfinite(tolerance) and tolerance >= 1):
        raise BadInputError(f"the tolerance must be a finite number of at least 1, not {tolerance}")
    start = time.perf_counter()
    result = VerifyResult()
    left = limit
    for row in store.resolve_devices(device):
        threads, n_imported = row.num_threads, store.count_imported(row.id, model)
        if not n_imported:
            continue
        measurer = _measurer_for(row, threads)
        if measurer is None:
            result.left_elsewhere[row.name] = n_imported
            continue
        with measurer:
            result.devices.append(row.name)
            ids = store.imported_ids(row.id, model, left)
            if len(set(ids)) != len(ids) or (left is not None and len(ids) > left):
                raise RegistryError(f"the registry named {len(ids)} records to verify, some twice or more than asked")
            _Verifier(store, measurer, tolerance, result, progress, row.id).run(ids)
        if left is not None:
            left -= len(ids)
            if left <= 0:
                break
    result.seconds = time.perf_counter() - start
    return result


def _measurer_for(row: DeviceRow, threads: int) -> Measurer | None:
    """A measurer for the device when this machine is that device (same CPU or GPU, threads and TVM release), else
    None."""
    if row.tvm_version != hostinfo.tvm_version():
        return None  # another TVM release: no need to start a worker to know
    try:
        measurer = Measurer(Target(parse(row.target_json, f"device {row.id}'s target")), threads or None)
    except RegistryError:  # a target this machine cannot run, or a thread count its runtime cannot give
        return None
    if measurer.device.key != row.key:
        measurer.close()
        return None
    return measurer


def _retimable(m: Measurement) -> bool:
    """Whether a failed or slow screening may be a neighbour's doing, worth timing again alone: not a schedule that
    was not made or built, nor a crash or a timeout (interference slows kernels down; it does not crash them, nor
    make one run for a minute, and each retry of those costs a worker or that minute)."""
    return m.ok or not (m.error or "").startswith(("build failed: ", "its trace", "crashed", "timeout"))


class _Verifier:
    """Verifies one device's records, batch by batch."""

    def __init__(
        self, store: RegistryStorage, measurer: Measurer, tolerance: float, result: VerifyResult, progress,
        device_id: int,
    ) -> None:  # fmt: skip
        self.store, self.measurer, self.tolerance, self.device_id = store, measurer, tolerance, device_id
        self.result, self.progress = result, progress
        self.builder = PersistentBuilder()  # its workers start on the first batch
        self.workloads: dict[int, tuple[str, tuple]] = {}  # workload id -> (module JSON, kernel arguments)

    def run(self, ids: list[int]) -> None:
        try:
            for begin in range(0, len(ids), BATCH):
                self.progress(begin, len(ids), self.measurer.device.name)
                asked = ids[begin : begin + BATCH]
                claims = self.store.claims(asked)
                self._load_workloads({c.workload_id for c in claims})
                self._check(claims, asked)
                self._batch(claims)
            self.progress(len(ids), len(ids), "done")
        finally:
            self.builder.shutdown()

    def _check(self, claims: list[Claim], asked: list[int]) -> None:
        """The claims are of the records asked for, once each, on this device, of workloads at hand, with a latency
        to judge: a served registry's answer is its claim (``registry --db URL verify``)."""
        ids = [c.record_id for c in claims]
        bad = next(
            (c for c in claims if c.device_id != self.device_id or c.workload_id not in self.workloads
             or not (isinstance(c.mean_s, float) and 0 < c.mean_s < MAX_CLAIM_S)),
            None,
        )  # fmt: skip
        if len(set(ids)) != len(ids) or not set(ids) <= set(asked) or bad is not None:
            raise RegistryError(
                "the registry's claims are not those of the records asked for, on this device, with a latency: "
                f"{len(claims)} claims for {len(asked)} records"
            )

    def _load_workloads(self, ids: set[int]) -> None:
        todo = sorted(ids - self.workloads.keys())
        for wid, w in self.store.workloads_by_id(todo).items():
            # Only the workload is parsed here (for its arguments); its schedule is made in the workers.
            try:
                self.workloads[wid] = (w.mod_json, kernel_arguments(tvm.ir.load_json(w.mod_json)))
            except Exception as e:  # noqa: BLE001 - TVM raises many kinds for a corrupt module (a server's claim)
                raise RegistryError(f"workload {wid}'s module does not load ({str(e).strip()[:120]})") from None

    def _batch(self, claims: list[Claim]) -> None:
        if self.measurer.device_type == "cpu":
            self._batch_in_slots(claims)
        else:
            self._batch_prebuilt(claims)

    def _batch_in_slots(self, claims: list[Claim]) -> None:
        """On a CPU, each record is built in memory by the worker that times it, every slot busy: the builds then
        use every core, and no library is linked or loaded (a third of a record's cost here)."""
        target = self.measurer.target
        jobs = {
            i: traced_job(self.workloads[c.workload_id][0], c.trace, target, self.workloads[c.workload_id][1])
            for i, c in enumerate(claims)
        }
        timings = self.measurer.screen(list(jobs.values()))
        self._recheck(claims, timings, {i: j for i, j in jobs.items() if _retimable(timings[i])})
        self._commit(claims, timings)

    def _batch_prebuilt(self, claims: list[Claim]) -> None:
        """On a GPU, which times one kernel at a time, the records are built first in the builder's processes, on
        every CPU core."""
        built = self.builder.build_traced(
            [(self.workloads[c.workload_id][0], c.trace) for c in claims], self.measurer.target
        )
        timings = [failed(b.error_msg.removeprefix("PersistentBuilder: ")) if b.error_msg else None for b in built]
        jobs = {
            i: artifact_job(b.artifact_path, self.workloads[c.workload_id][1])
            for i, (c, b) in enumerate(zip(claims, built, strict=True))
            if not b.error_msg
        }
        try:
            for i, m in zip(jobs, self.measurer.screen(list(jobs.values())), strict=True):
                timings[i] = m
            self._recheck(claims, timings, {i: j for i, j in jobs.items() if _retimable(timings[i])})
        finally:
            for b in built:
                if b.artifact_path:
                    shutil.rmtree(Path(b.artifact_path).parent, ignore_errors=True)
        self._commit(claims, timings)

    def _recheck(self, claims: list[Claim], timings: list, jobs: dict[int, KernelJob]) -> None:
        """Interference only ever slows a kernel down: a built record over the tolerance (or whose run failed) is
        timed again, alone and precisely, up to RECHECKS times, and its fastest timing counts. An honest record
        then needs one quiet moment; a slow one stays slow."""
        for round_ in range(RECHECKS):
            suspects = [i for i in jobs if judge(claims[i].mean_s, timings[i], self.tolerance)[0] == "disputed"]
            if round_:  # timed alone already: only one near the tolerance may still be a neighbour's doing
                suspects = [i for i in suspects if not timings[i].ok or self._ratio(claims[i], timings[i]) < FAR]
            if not suspects:
                return
            for i, m in zip(suspects, self.measurer.recheck([jobs[i] for i in suspects]), strict=True):
                if m.ok and (not timings[i].ok or m.mean_us < timings[i].mean_us):
                    timings[i] = m

    def _ratio(self, claim: Claim, m: Measurement) -> float:
        """How many tolerances slower than claimed."""
        return m.mean_us / (claim.mean_s * 1e6) / self.tolerance

    def _commit(self, claims: list[Claim], timings: list[Measurement]) -> None:
        found, results = [], []
        for c, m in zip(claims, timings, strict=True):
            verdict, reason = judge(c.mean_s, m, self.tolerance)
            measured = m.mean_us if m.ok else None
            found.append(Verdict(c.record_id, c.workload_id, c.device_id, verdict,
                                          measured / 1e6 if measured is not None else None))  # fmt: skip
            results.append(RecordResult(c.record_id, c.shash, c.task_name, c.mean_s * 1e6, measured, verdict, reason))
        at = dt.datetime.now(dt.timezone.utc)
        self.store.record_verdicts(found, at)
        self.result.records += results
