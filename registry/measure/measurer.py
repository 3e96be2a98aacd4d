"""``Measurer``: the one place where the registry times anything.

Every latency the registry records or reports goes through it: transfer's candidates and a task's default schedule
(the "before"), tuning batches and their precise re-checks, and a model's end-to-end latency. Nothing is timed in
the caller's process: the measurer sends each job to a worker process (``registry.measure.worker``), so a kernel
that segfaults, aborts, hangs or runs out of memory costs that one measurement, reported with its reason, and the
run goes on with a fresh worker.

Where it measures:

- this machine's CPU (``llvm`` targets) or GPU (``cuda``), through a pool of persistent workers; on a CPU, up to the
  calibrated degree of parallelism at once (``registry.measure.calibrate``), each measurement in flight on cores of
  its own; a GPU measures one at a time, and the kernels it is given to build are built first on every CPU core;
- the servers behind a TVM RPC tracker (``rpc=Tracker(...)``), one job per free server at once.

A measurer **describes the device it measures on** (``device``): the CPU or GPU the worker, or the RPC server, reports,
with its runtime thread count and TVM release. Records are filed under that description, never under this host's
when the measuring happened elsewhere.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Sequence

from tvm.target import Target

from registry import hostinfo
from registry.errors import BadInputError, RegistryError
from registry.measure.calibrate import SAMPLE, Calibration, calibrate
from registry.measure.pool import WorkerPool, uses_gpu
from registry.measure.tracker import Tracker
from registry.measure.types import (
    MODEL,
    PRECISE,
    QUICK,
    SCREEN,
    DeviceDescription,
    KernelJob,
    Measurement,
    ModelJob,
    Settings,
)
from registry.measure.worker import MEMORY_ENV
from registry.store.rows import DeviceSpec
from registry.tvm_side import cpus
from registry.tvm_side.target import canonical_target

KERNEL_TIMEOUT_S = 60.0  # one kernel job: its build (when it has one), loading, inputs and the timing itself
MODEL_TIMEOUT_S = 600.0  # an untuned model can take seconds per run: 7 timed runs and a warm-up
_DEVICE_TYPES = {"llvm": "cpu", "cuda": "cuda"}


class Measurer:
    """Times kernels and models on one device: this machine's, or an RPC server's.

    ``threads`` is the TVM runtime thread count measurements run with (default: what the runtime chooses there;
    ``device`` says which it was). ``dop`` fixes how many kernels are measured
    at once; by default it is calibrated on the first batch (this machine) or is the number of free servers (RPC).
    Raises BadInputError for a target this machine (or the server) cannot run, RegistryError when the device cannot
    be reached.
    """

    def __init__(
        self,
        target: Target,
        threads: int | None = None,
        *,
        rpc: Tracker | None = None,
        dop: int | None = None,
        verbose: bool = False,
    ) -> None:
        kind = target.kind.name
        if kind not in _DEVICE_TYPES:
            raise BadInputError(f"cannot measure for target kind {kind!r}: the registry measures llvm and cuda")
        self.target, self.rpc = target, rpc
        self.device_type = _DEVICE_TYPES[kind]
        self._cores = cpus.usable()
        # A GPU here times one kernel at a time, and so does a CPU's precise timing: the kernels it is given to build
        # are built first, on every core, then timed alone (a ddddocr-det's first transfer built its 196 defaults
        # and donor candidates one after the other in the one worker that timed them, a core idle).
        self._builds_apart = rpc is None and (uses_gpu(self.device_type) or len(self._cores) > 1)
        self._builders: WorkerPool | None = None  # started on the first such batch
        self.calibration: Calibration | None = None
        self.kind = "rpc" if rpc is not None else "local"
        servers = 0
        if rpc is not None:
            servers = rpc.free_servers()
            if servers < 1:
                raise RegistryError(f"the RPC tracker at {rpc.address} has no free server of key {rpc.key!r}")
        # TVM_BIND_THREADS=0: each measurement in flight is given cores of its own here; TVM must not re-pin them.
        env = {"TVM_BIND_THREADS": "0", **({hostinfo.THREADS_ENV: str(threads)} if threads else {})}
        if self.device_type == "cpu" and rpc is None:
            env[MEMORY_ENV] = str(_worker_memory_mb())
        self._env = env  # the builders' too: the memory limit holds for a build
        self.pool = WorkerPool(1, env, verbose=verbose, gpu=uses_gpu(self.device_type))
        if rpc is None and self.device_type == "cpu" and threads and len(self._cores) // threads > 1:
            # Measurements will run side by side: both workers start now (forked by the zygote, which may still be
            # importing TVM when this is the process's first measurer), not the second in the middle of a batch.
            self.pool.size = 2
            for _ in range(2):
                self.pool.prestart({"op": "warm"})
        try:
            self.description = self._describe(threads)
        except BaseException:
            self.pool.close()
            raise
        self.threads = self.description.threads
        if rpc is not None:
            self.dop, self._auto = (min(dop, servers) if dop else servers), False
            self.pool.size = self.dop
        else:
            # A GPU runs one kernel at a time; on a CPU every measurement in flight needs its threads' cores.
            most = 1 if self.device_type == "cuda" else max(1, len(self._cores) // max(1, self.threads))
            self.dop, self._auto = max(1, dop or 1), dop is None and most > 1
            self.pool.size = max(self.dop, most)
        self.device = DeviceSpec.of(
            canonical_target(target), self.threads, self.description.model, self.description.tvm_version
        )

    # -- the device ------------------------------------------------------------------------------------------------

    def _describe(self, threads: int | None) -> DeviceDescription:
        reply = self.pool.call(self._request("describe"), timeout=120.0)
        where = f"the RPC servers of {self.rpc.address}" if self.rpc else "this machine"
        if "error" in reply:
            raise RegistryError(f"cannot measure for target {self.target.kind.name}: {reply['error']}")
        desc = DeviceDescription(**reply)
        if threads and self.device_type == "cpu" and desc.threads != threads:
            raise RegistryError(
                f"TVM's runtime on {where} runs {desc.threads} thread(s), not {threads}: it reads "
                f"{hostinfo.THREADS_ENV} once, when it starts"
                + (" (set it where the RPC server starts)" if self.rpc else "")
            )
        problem = target_mismatch(self.target, desc, where)
        if problem:
            raise BadInputError(problem)
        return desc

    def _request(self, op: str, **fields) -> dict:
        request = {"op": op, "device": self.device_type, **fields}
        if self.rpc is not None:
            request["rpc"] = self.rpc.as_json()
        return request

    # -- kernels ---------------------------------------------------------------------------------------------------

    def kernels(self, jobs: Sequence[KernelJob], settings: Settings = PRECISE, at_once: int = 1) -> list[Measurement]:
        """Each job timed with ``settings``, ``at_once`` at a time (each on cores of its own, on this machine)."""
        at_once = max(1, min(at_once, self.pool.size))
        per_slot = max(1, len(self._cores) // at_once)
        # Each measurement in flight keeps cores of its own: a process that the OS moves between cores runs from a
        # cold cache, which read as 5-10% noise here.
        slots = [self._cores[k * per_slot : (k + 1) * per_slot] for k in range(at_once)]
        local_cpu = self.rpc is None and self.device_type == "cpu"
        built = self._built_apart(jobs) if at_once == 1 else {}  # side by side, each worker builds its own
        results: list[Measurement | None] = [None] * len(jobs)
        requests, timed = [], []
        for i, job in enumerate(jobs):
            if isinstance(built.get(i), Measurement):  # it did not build: nothing to time
                results[i] = built[i]
                continue
            if i in built:
                job = dataclasses.replace(job, artifact=built[i], module=None, trace=None)
            requests.append(self._request("kernel", job=job.as_json(), settings=settings.as_json()))
            timed.append(i)
        try:
            replies = self._time(requests, at_once, slots if local_cpu else None)
        finally:
            for artifact in built.values():
                if isinstance(artifact, str):
                    shutil.rmtree(os.path.dirname(artifact), ignore_errors=True)
        for i, reply in zip(timed, replies, strict=True):
            results[i] = _measurement(reply)
        return results  # type: ignore[return-value]

    def _time(self, requests: list[dict], at_once: int, slots: list[list[int]] | None) -> list[dict]:
        """The workers' replies to ``kernel`` requests: where a kernel is run and timed."""
        return self.pool.run(requests, at_once=at_once, timeout=KERNEL_TIMEOUT_S, slots=slots)

    def _built_apart(self, jobs: Sequence[KernelJob]) -> dict[int, str | Measurement]:
        """Given two or more kernels to build and time one at a time here: each built into a library on every CPU
        core at once (by index: its library, or why it did not build), instead of one after the other in the worker
        that times them. Otherwise nothing: each worker builds what it times. On a CPU, a stored trace is applied
        where it is timed: its layout rewrites change the arguments the worker makes (``scheduled_arguments``)."""
        gpu = uses_gpu(self.device_type)
        todo = [i for i, job in enumerate(jobs) if job.artifact is None and (gpu or job.trace is None)]
        if not self._builds_apart or len(todo) < 2:
            return {}
        if self._builders is None:
            self._builders = WorkerPool(len(self._cores), self._env, gpu=gpu, max_uses=256)
        requests = [{"op": "build", "module": jobs[i].module, "target": jobs[i].target, "trace": jobs[i].trace}
                    for i in todo]  # fmt: skip
        replies = self._builders.run(requests, at_once=self._builders.size, timeout=KERNEL_TIMEOUT_S)
        return {i: r["artifact"] if "artifact" in r else _measurement(r) for i, r in zip(todo, replies, strict=True)}

    def measure(self, jobs: Sequence[KernelJob]) -> list[Measurement]:
        """Quick timings at the degree of parallelism, calibrated on the first batch of two or more jobs."""
        if self._auto and len(jobs) >= 2:
            return self._calibrate_then_measure(jobs)
        return self.kernels(jobs, QUICK, self.dop)

    def screen(self, jobs: Sequence[KernelJob]) -> list[Measurement]:
        """Short timings (``SCREEN``) with every slot busy, uncalibrated. Interference only slows a kernel down, so
        each timing is an upper bound: fit for a one-sided test ("no slower than claimed", ``registry verify``) whose
        failures are timed again with ``recheck``, not for ranking candidates."""
        return self.kernels(jobs, SCREEN, self.pool.size)

    def recheck(self, jobs: Sequence[KernelJob]) -> list[Measurement]:
        """Precise timings, one at a time: what a record that may become a task's best is filed with."""
        return self.kernels(jobs, PRECISE, 1)

    def _calibrate_then_measure(self, jobs: Sequence[KernelJob]) -> list[Measurement]:
        self._auto = False
        probe = list(jobs[:SAMPLE])
        kept: dict[int, Measurement] = {}

        def measure_at(d: int, items: list[KernelJob]) -> list[float]:
            results = self.kernels(items, QUICK, d)
            if d == 1:
                kept.update(enumerate(results))
            return [m.median_s for m in results]

        most = self.pool.size
        self.calibration, _ = calibrate(measure_at, probe, most)
        self.dop = self.calibration.dop
        return [kept[i] for i in range(len(probe))] + self.kernels(jobs[len(probe) :], QUICK, self.dop)

    # -- models ----------------------------------------------------------------------------------------------------

    def model(self, job: ModelJob, settings: Settings = MODEL) -> Measurement:
        """A compiled model's end-to-end latency, alone."""
        # On this CPU, cores of its own, as many as its threads: a thread the OS moves between cores runs from a
        # cold cache (a one-thread model timed unpinned varied by several percent from run to run).
        cores = self._cores[: max(1, self.threads)] if self.rpc is None and self.device_type == "cpu" else None
        request = self._request("model", job=job.as_json(), settings=settings.as_json(), cores=cores)
        return _measurement(self.pool.run([request], timeout=MODEL_TIMEOUT_S)[0])

    def close(self) -> None:
        self.pool.close()
        if self._builders is not None:
            self._builders.close()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def summary(self) -> str:
        where = f"on the RPC servers of {self.rpc.address}" if self.rpc else "here"
        return f"measured {where} ({self.description.model}), {self.dop} at a time"


def target_mismatch(target: Target, desc: DeviceDescription, where: str) -> str | None:
    """Why code built for ``target`` cannot run on the device ``desc`` describes (None: it can): a CPU of another
    triple, a GPU of another arch."""
    if desc.kind == "cuda":
        arch, capability = target.attrs.get("arch"), desc.details.get("compute_version")
        if arch and capability and str(arch) != hostinfo.cuda_arch(capability):
            return (
                f"the target is for {arch}, but the GPU of {where} ({desc.model}) is {hostinfo.cuda_arch(capability)}: "
                "its kernels cannot run there (--target cuda takes the GPU's arch)"
            )
        return None
    wanted, triple = target.attrs.get("mtriple"), desc.details.get("triple")
    if wanted and triple and str(wanted) != triple:
        return (
            f"the target is for {wanted}, but {where} is {triple}: its code cannot run there "
            f'(give --target with "mtriple": "{triple}", or measure on a matching RPC server)'
        )
    return None


def _worker_memory_mb() -> int:
    """Half of this machine's memory, per worker: what a kernel or a model being measured may take."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return max(2048, pages * size // 2 >> 20)
    except (ValueError, OSError):
        return 0  # unknown: no cap


def _measurement(reply: dict) -> Measurement:
    if "error" in reply:
        return Measurement((), str(reply["error"]))
    secs = tuple(float(s) for s in reply.get("run_secs", ()))
    return Measurement(secs, None if secs else "no timing came back")
