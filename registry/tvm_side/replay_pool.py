"""Worker processes that replay traces (``replay_worker``), so that a trace which crashes TVM costs a worker, not the
process that checks it. This module itself does not import TVM.

One pool serves the whole process (``shared_pool``): a worker imports TVM once (1-2 s) and keeps each workload's
module after its first use, so later imports and commits pay neither again.
"""

from __future__ import annotations

import atexit
import os
import queue
import select
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

import orjson

from registry.tvm_side.replay_worker import read_frame, write_payload

# A replay takes milliseconds; this bounds a crafted trace that makes TVM loop, and a worker's start (TVM's import).
TIMEOUT_S = 120.0
# A worker's start (1-2 s of TVM import) is worth hundreds of replays: another worker only for this many jobs more.
JOBS_PER_WORKER = 200


@dataclass(frozen=True)
class Job:
    key: str  # the workload, as the worker caches its module
    mod_json: str
    trace: list
    facts: bool = False


class _Worker:
    def __init__(self) -> None:
        env = dict(os.environ, TVM_NUM_THREADS="1")  # it replays schedules, it runs nothing
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "registry.tvm_side.replay_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # TVM's own log lines; the reply carries what matters
            env=env,
        )
        self.loaded: set[str] = set()

    def call(self, job: Job) -> dict[str, Any]:
        request = {"key": job.key, "trace": job.trace, "facts": job.facts}
        if job.key not in self.loaded:
            request["mod_json"] = job.mod_json
        timed_out = False
        try:
            payload = orjson.dumps(request)
        except TypeError as e:  # integers past 64 bits: no JSON TVM reads either
            return {"applies": False, "error": f"it holds values TVM cannot read ({e})"}
        try:
            write_payload(self.proc.stdin, payload)
            ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT_S)
            timed_out = not ready
            reply = None if timed_out else read_frame(self.proc.stdout)
        except OSError:  # the worker died before it read the request
            reply = None
        if reply is None:
            return {"applies": False, "error": self._death(timed_out)}
        self.loaded.add(job.key)
        return orjson.loads(reply)

    def _death(self, timed_out: bool) -> str:
        self.kill()
        if timed_out:
            return f"replaying it took TVM more than {TIMEOUT_S:.0f} s"
        code = self.proc.returncode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        return f"replaying it crashed TVM ({how})"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.alive:
            self.proc.stdin.close()  # the worker's loop ends at end of input
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()


class ReplayPool:
    """Up to ``size`` replay workers, started on first need and restarted after a crash."""

    def __init__(self, size: int | None = None) -> None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.size = size or max(1, min(4, cores))
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()  # one run at a time: the workers are not shared between runs

    def start(self) -> None:
        """Start a worker now, without waiting for it: its TVM import then overlaps whatever the caller does before
        its first ``run``."""
        with self._lock:
            self._grow(1)

    def _grow(self, n: int) -> None:
        self._workers = [w for w in self._workers if w.alive]
        while len(self._workers) < min(self.size, n):
            self._workers.append(_Worker())

    def run(self, jobs: list[Job]) -> list[dict[str, Any]]:
        """Each job's reply, in order. A worker that dies or hangs answers ``{"applies": False, "error": why}`` for
        the job it was on, and is replaced."""
        if not jobs:
            return []
        with self._lock:
            self._grow(1 + (len(jobs) - 1) // JOBS_PER_WORKER)
            todo: queue.Queue = queue.Queue()
            for item in enumerate(jobs):
                todo.put(item)
            replies: list[dict[str, Any] | None] = [None] * len(jobs)
            threads = [threading.Thread(target=self._drain, args=(i, todo, replies)) for i in range(len(self._workers))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return replies  # type: ignore[return-value]

    def _drain(self, slot: int, todo: queue.Queue, replies: list) -> None:
        while True:
            try:
                i, job = todo.get_nowait()
            except queue.Empty:
                return
            if not self._workers[slot].alive:
                self._workers[slot] = _Worker()
            replies[i] = self._workers[slot].call(job)

    def close(self) -> None:
        with self._lock:
            for w in self._workers:
                w.close()
            self._workers = []


_shared: ReplayPool | None = None


def shared_pool() -> ReplayPool:
    global _shared
    if _shared is None:
        _shared = ReplayPool()
        atexit.register(_shared.close)
    return _shared
