"""Replaying unchecked traces in worker processes (``replay.serve`` in the registry's worker pool), so that a trace
which crashes TVM costs a worker, not the process that checks it. This module itself does not import TVM.

One pool serves the whole process (``shared_pool``): a worker (forked with TVM imported, by
``registry.measure.zygote_process``) keeps each module after its first use, so later imports and commits do not parse
it again.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from typing import Any

import orjson

from registry.measure.pool import WorkerPool

# A replay takes milliseconds; this bounds a crafted trace that makes TVM loop, and a worker's start (TVM's import).
TIMEOUT_S = 120.0
# Another worker only for this many jobs more. Chosen when each worker imported TVM itself (1-2 s, the cost of
# hundreds of replays); forked from the zygote a worker now starts in milliseconds and pays only its first parse of
# each workload, so a lower value may pay off: not measured yet.
JOBS_PER_WORKER = 200


@dataclass(frozen=True)
class Job:
    key: str  # the workload, as the worker caches its module
    mod_json: str
    trace: list
    facts: bool = False


class ReplayPool:
    """Up to ``size`` replay workers, started on first need and replaced after a crash."""

    def __init__(self, size: int | None = None) -> None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.size = size or max(1, min(4, cores))
        # one runtime thread: a replay schedules, it runs nothing
        self._pool = WorkerPool(self.size, {"TVM_NUM_THREADS": "1"})

    def start(self) -> None:
        """Start a worker importing TVM now, without waiting: that import then overlaps what the caller does before
        its first ``run``."""
        self._pool.prestart({"op": "warm"}, timeout=TIMEOUT_S)

    def run(self, jobs: list[Job]) -> list[dict[str, Any]]:
        """Each job's reply, in order. A worker that dies or hangs answers ``{"applies": False, "error": why}`` for
        the job it was on, and is replaced."""
        requests, replies = [], [None] * len(jobs)
        for i, job in enumerate(jobs):
            request = {"op": "replay", "key": job.key, "mod_json": job.mod_json, "trace": job.trace,
                       "facts": job.facts}  # fmt: skip
            try:
                orjson.dumps(request)
            except TypeError as e:  # integers past 64 bits: no JSON TVM reads either
                replies[i] = {"applies": False, "error": f"it holds values TVM cannot read ({e})"}
                continue
            requests.append((i, request))
        at_once = min(self.size, 1 + (len(requests) - 1) // JOBS_PER_WORKER) if requests else 1
        for (i, _), reply in zip(
            requests, self._pool.run([r for _, r in requests], at_once=at_once, timeout=TIMEOUT_S), strict=True
        ):
            if "applies" not in reply:  # the worker died or hung on it
                reply = {"applies": False, "error": _why(reply.get("error", "no reply"))}
            replies[i] = reply
        return replies  # type: ignore[return-value]

    def close(self) -> None:
        self._pool.close()


def _why(pool_error: str) -> str:
    if pool_error.startswith("timeout"):
        return f"replaying it took TVM more than {TIMEOUT_S:.0f} s"
    return f"replaying it {pool_error.replace('crashed (', 'crashed TVM (signal ', 1)}"


_shared: ReplayPool | None = None


def shared_pool() -> ReplayPool:
    global _shared
    if _shared is None:
        _shared = ReplayPool()
        atexit.register(_shared.close)
    return _shared
