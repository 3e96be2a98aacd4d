"""A scheduled kernel's outputs against its workload's unscheduled ones, on the same inputs.

Measuring a candidate says how fast it is, not that it computes its workload. MetaSchedule's search made a
MobileNetV2 kernel (a 1x1 convolution, its ReLU6, then the padding of the next depthwise convolution, 6x6 into 7x7)
whose fastest candidate, 2.5x faster than the next, left elements of its output unwritten: the model it compiled
into was off by 0.63 in its logits. So before a candidate becomes a task's best it is run here on seeded inputs and
compared with the workload as TVM lowers it unscheduled (naive loops: slow, but what the operators mean). Every
buffer starts from the same seeded values in both runs, so an output element one of them leaves unwritten differs.

A CPU kernel runs in this process, as built for the host: only for the local machine (a kernel built for another
CPU, measured over RPC, may not run here), and not on a GPU, whose kernels do not run without their device.

Both are compiled without LLVM's optimizations (``opt-level`` 0): what is checked is the schedule's loops and
indices, which LLVM's passes must not change. At -O3 the check takes a third of a CNN's tuning time, in this process
while the measurement workers wait; unoptimized, a workload's check takes half as long, and a schedule's half as
long or, for a kernel LLVM takes seconds to emit at any level, about as long (docs/BENCHMARKS.md, "Where a budget's
minutes went").
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from registry.tvm_side import sigmoid  # noqa: F401  (registers TVM's sigmoid lowering: sigmoid.py)

RTOL = 1e-3  # of the largest output magnitude: a reordered float32 reduction differs by far less


class OutputCheck:
    """The outputs of one workload's candidates, each against the unscheduled workload's (computed once)."""

    def __init__(self, workload: IRModule, target: Target, seed: int = 0) -> None:
        self.workload, self.target = workload, unoptimized(target)
        rng = np.random.default_rng(seed)
        self._initial = [_seeded(rng, a) for a in ArgInfo.from_prim_func(_main(workload))]
        self._want: list[np.ndarray] | None = None

    def problem(self, scheduled: IRModule) -> str | None:
        """Why ``scheduled`` (a schedule of the workload, postprocessed) does not compute what the workload does, or
        None when it does."""
        if self._want is None:
            self._want = self._run(self.workload)
        got = self._run(scheduled)
        for index, (g, w) in enumerate(zip(got, self._want, strict=True)):
            scale = float(np.abs(w).max()) if w.size else 0.0
            if g.shape != w.shape or not np.allclose(g, w, rtol=0.0, atol=RTOL * max(scale, 1e-6), equal_nan=True):
                wrong = int(np.sum(~np.isclose(g, w, rtol=0.0, atol=RTOL * max(scale, 1e-6), equal_nan=True)))
                return f"wrong output: {wrong} of {w.size} elements of argument {index} differ from the workload's"
        return None

    def _run(self, mod: IRModule) -> list[np.ndarray]:
        built = tvm.compile(mod, target=self.target)
        tensors = [tvm.runtime.tensor(a.copy()) for a in self._initial]
        built(*tensors)
        return [t.numpy() for t in tensors]


def unoptimized(target: Target) -> Target:
    """``target`` with LLVM's optimizations off: code that computes the same values, sooner compiled."""
    return Target({**target.export(), "opt-level": 0})


def output_check(workload: IRModule, target: Target, measurer) -> OutputCheck | None:
    """The check for a workload's candidates, where they can run in this process: measured on this machine's CPU."""
    local_cpu = target.kind.name == "llvm" and measurer.kind == "local"
    return OutputCheck(workload, target) if local_cpu else None


def _main(mod: IRModule):
    return next(f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))


def _seeded(rng: np.random.Generator, arg: ArgInfo) -> np.ndarray:
    """A buffer's seeded starting values: normal floats; integers zero (indices stay in range)."""
    shape = [int(d) for d in arg.shape]
    if "float" in arg.dtype:
        return rng.standard_normal(shape).astype(arg.dtype)
    return np.zeros(shape, arg.dtype)
