"""A MetaSchedule builder whose worker processes outlive one batch.

TVM's ``LocalBuilder`` starts a fresh process pool for every batch, and each worker's default build function imports
``tvm.s_tir.tensor_intrin``, which parses every target's tensor intrinsics in TVMScript (the CUDA ones alone take
most of it). Measured here: 54 s per import, on a machine where MetaSchedule gives a build 30 s before killing it,
so with the defaults *every* candidate failed. Elsewhere it is about 12 s per batch for a 25-140 ms build.

``PersistentBuilder`` keeps its workers (the measurement worker pool's, recycled after ``max_uses`` builds, as a
guard against the slow leak that made TVM restart its pool), which build with ``registry.tvm_side.build``, without
that import.
"""

from __future__ import annotations

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.target import Target

from registry.measure.pool import WorkerPool, uses_gpu
from registry.tvm_side import cpus


def usable_cores() -> int:
    """Cores this process may run on, before TVM pinned anything (see tvm_side.cpus)."""
    return cpus.count()


@derived_object
class PersistentBuilder(PyBuilder):
    """Builds candidates in a pool of ``max_workers`` processes that is started once and reused.

    Each kernel is built and linked into a shared library in the pool (``registry.measure.worker``'s ``build``):
    MetaSchedule's default exports a tar of object files, which every runner then links before loading it, about a
    third of a measurement's cost here, paid one candidate at a time while the builders (in parallel) sit idle. A
    build that crashes or hangs costs that candidate, as a measurement does.
    """

    def __init__(self, max_workers: int | None = None, timeout_sec: float = 30.0, max_uses: int = 256) -> None:
        super().__init__()
        self.max_workers = max_workers or usable_cores()
        self.timeout_sec = timeout_sec
        self.max_uses = max_uses
        self._pool: WorkerPool | None = None

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        if not build_inputs:
            return []
        return self._run(
            [{"op": "build", "module": tvm.ir.save_json(b.mod), "target": str(b.target)} for b in build_inputs],
            build_inputs[0].target.kind.name,
        )

    def build_traced(self, items: list[tuple[str, list]], target: Target) -> list[BuilderResult]:
        """Stored records rebuilt: each (workload module JSON, trace) has its trace applied to the workload and
        is built, both in the pool's workers. A stored trace never runs in this process (see the worker's
        ``_scheduled``)."""
        target_json = str(target)
        return self._run(
            [{"op": "build", "module": mod_json, "target": target_json, "trace": trace} for mod_json, trace in items],
            target.kind.name,
        )

    def _run(self, requests: list[dict], target_kind: str) -> list[BuilderResult]:
        if self._pool is None:
            # Building for CUDA initializes CUDA where a GPU is present: only a worker that can is any use.
            gpu = uses_gpu(target_kind)
            self._pool = WorkerPool(self.max_workers, max_uses=self.max_uses, gpu=gpu)
        replies = self._pool.run(requests, at_once=self.max_workers, timeout=self.timeout_sec)
        return [
            BuilderResult(r["artifact"], None)
            if "artifact" in r
            else BuilderResult(None, f"PersistentBuilder: {r['error']}")
            for r in replies
        ]

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
