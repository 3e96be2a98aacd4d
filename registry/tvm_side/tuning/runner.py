"""Measuring candidates several at a time, then the promising ones again, alone and precisely (the DOPpler idea).

``Measurer.measure`` times a batch of built candidates ``dop`` at a time with a quick evaluator setting; the
engine then calls ``Measurer.recheck`` on the few that could become a task's best, which times them one at a time
with the precise setting, so that a record that counts as a best was measured without interference.

Two back-ends:

- ``LocalMeasurer``: a pool of worker processes on this machine, started once, ``dop`` of them measuring at a time
  (calibrated on the first batch, see ``calibrate``). TVM's runtime pins a process's threads to the first cores;
  with several measuring processes that would stack them all on core 0, so workers run with
  ``TVM_BIND_THREADS=0`` and the OS spreads them.
- ``RpcMeasurer``: MetaSchedule's RPCRunner against a TVM RPC tracker, one session per server of the key, so
  measurement fans out to other machines (or to servers on this one).
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
from dataclasses import dataclass

from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RPCConfig, RPCRunner, RunnerInput, RunnerResult
from tvm.s_tir.meta_schedule.runner.local_runner import _worker_func
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

from registry.tvm_side import ORIGINAL_AFFINITY
from registry.tvm_side.tuning.calibrate import SAMPLE, Calibration, calibrate

# Quick: enough to rank candidates. Precise: what a record that may become a task's best is filed with.
QUICK = EvaluatorConfig(number=1, repeat=3, min_repeat_ms=10, enable_cpu_cache_flush=False)
PRECISE = EvaluatorConfig(number=1, repeat=5, min_repeat_ms=30, enable_cpu_cache_flush=False)


def _worker_setup(cores: list[int]) -> None:
    """Pool initializer. A worker inherits its parent's CPU mask, which TVM may have pinned to core 0 (see
    compat.unpin): all workers would then share one core. It gets the parent's original cores back, and TVM's
    runtime is told not to pin again (it reads TVM_BIND_THREADS when it first starts its threads)."""
    os.sched_setaffinity(0, cores)
    os.environ["TVM_BIND_THREADS"] = "0"


class LocalMeasurer:
    """Times built candidates on this machine, ``dop`` worker processes at a time.

    With ``dop=None`` the degree is calibrated on the first batch of two or more candidates (``calibrate``), up to
    ``max_dop`` (the cores over the runtime's threads)."""

    kind = "local"

    def __init__(self, dop: int | None, max_dop: int, timeout_sec: float = 30.0) -> None:
        self.dop = max(1, dop or 1)
        self.calibration: Calibration | None = None
        self._auto = dop is None and max_dop > 1
        self.timeout_sec = timeout_sec
        self._cores = sorted(ORIGINAL_AFFINITY or range(os.cpu_count() or 1))
        self._pool = PopenPoolExecutor(
            max_workers=max(self.dop, max_dop),
            timeout=timeout_sec,
            initializer=functools.partial(_worker_setup, self._cores),
            maximum_process_uses=512,
            stderr=subprocess.DEVNULL,  # a failing candidate's errors come back in its result; exit noise does not
        )
        self._max_dop = max(self.dop, max_dop)

    def _run(self, inputs: list[RunnerInput], config: EvaluatorConfig, at_once: int) -> list[RunnerResult]:
        jobs = [(str(i.artifact_path), str(i.device_type), tuple(a.as_json() for a in i.args_info)) for i in inputs]
        per_slot = max(1, len(self._cores) // at_once)
        slots = [self._cores[k * per_slot : (k + 1) * per_slot] for k in range(at_once)]

        def one(slot_and_job):
            # Each measurement in flight gets cores of its own, and keeps them: an unpinned process that the OS
            # moves between cores runs from a cold cache, which read as 5-10% noise here.
            cores, job = slot_and_job
            os.sched_setaffinity(0, cores)
            return _worker_func(None, None, None, config, 1, *job)

        outcomes = []
        for start in range(0, len(jobs), at_once):  # at most at_once in flight; the other workers stay idle
            group = jobs[start : start + at_once]
            outcomes += list(self._pool.map_with_error_catching(one, list(zip(slots, group, strict=False))))
        return [_result(o, self.timeout_sec) for o in outcomes]

    def measure(self, inputs: list[RunnerInput]) -> list[RunnerResult]:
        if self._auto and len(inputs) >= 2:
            return self._calibrate_then_measure(inputs)
        return self._run(inputs, QUICK, self.dop)

    def _calibrate_then_measure(self, inputs: list[RunnerInput]) -> list[RunnerResult]:
        self._auto = False
        probe = inputs[:SAMPLE]
        kept: dict[int, RunnerResult] = {}

        def measure_at(d: int, items: list[RunnerInput]) -> list[float]:
            results = self._run(items, QUICK, d)
            if d == 1:
                kept.update(enumerate(results))
            return [median_s(r) for r in results]

        self.calibration, _ = calibrate(measure_at, probe, self._max_dop)
        self.dop = self.calibration.dop
        return [kept[i] for i in range(len(probe))] + self._run(inputs[len(probe) :], QUICK, self.dop)

    def recheck(self, inputs: list[RunnerInput]) -> list[RunnerResult]:
        return self._run(inputs, PRECISE, 1)

    def close(self) -> None:
        self._pool.shutdown()


def run_secs(result: RunnerResult) -> list[float]:
    """A result's seconds as Python floats (TVM hands them back as FloatImm), empty if it failed."""
    return [float(s) for s in result.run_secs] if result.error_msg is None and result.run_secs else []


def median_s(result: RunnerResult) -> float:
    secs = run_secs(result)
    return statistics.median(secs) if secs else float("inf")


def _result(outcome, timeout_sec: float) -> RunnerResult:
    if outcome.status == StatusKind.COMPLETE:
        return RunnerResult([float(s) for s in outcome.value], None)
    if outcome.status == StatusKind.TIMEOUT:
        return RunnerResult(None, f"timeout, killed after {timeout_sec} s")
    return RunnerResult(None, f"run failed: {outcome.value}")


@dataclass(frozen=True)
class Tracker:
    host: str
    port: int
    key: str

    @classmethod
    def parse(cls, text: str) -> Tracker:
        """``HOST:PORT:KEY``, e.g. ``127.0.0.1:9190:xeon``."""
        from registry.errors import BadInputError

        parts = text.rsplit(":", 2)
        if len(parts) != 3 or not parts[1].isdigit() or not parts[0] or not parts[2]:
            raise BadInputError(f"--rpc expects HOST:PORT:KEY, e.g. 127.0.0.1:9190:xeon; got {text!r}")
        return cls(parts[0], int(parts[1]), parts[2])

    def servers(self) -> int:
        """How many servers of this key the tracker has free."""
        from tvm import rpc

        from registry.errors import RegistryError

        try:
            summary = rpc.connect_tracker(self.host, self.port).summary()
        except (OSError, RuntimeError) as e:
            raise RegistryError(f"cannot reach the RPC tracker at {self.host}:{self.port}: {e}") from None
        return int(summary.get("queue_info", {}).get(self.key, {}).get("free", 0))


class RpcMeasurer:
    """Times built candidates on the RPC servers behind a tracker, one session per server at once."""

    kind = "rpc"

    def __init__(self, tracker: Tracker, dop: int | None = None, timeout_sec: float = 60.0) -> None:
        from registry.errors import RegistryError

        servers = tracker.servers()
        if servers < 1:
            raise RegistryError(
                f"the RPC tracker at {tracker.host}:{tracker.port} has no free server of key {tracker.key!r}"
            )
        self.dop = min(dop, servers) if dop else servers
        self.calibration = None  # one session per server: servers are separate machines, nothing to calibrate
        config = RPCConfig(tracker.host, tracker.port, tracker.key, session_timeout_sec=int(timeout_sec))
        self._quick = RPCRunner(config, QUICK, max_workers=self.dop)
        self._precise = RPCRunner(config, PRECISE, max_workers=1)

    @staticmethod
    def _run(runner: RPCRunner, inputs: list[RunnerInput]) -> list[RunnerResult]:
        return [f.result() for f in runner.run(inputs)]

    def measure(self, inputs: list[RunnerInput]) -> list[RunnerResult]:
        return self._run(self._quick, inputs)

    def recheck(self, inputs: list[RunnerInput]) -> list[RunnerResult]:
        return self._run(self._precise, inputs)

    def close(self) -> None:
        pass
