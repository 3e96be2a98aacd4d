"""Build and time one task's kernel in this process, as MetaSchedule's LocalBuilder and LocalRunner would.

Transfer measures a handful of candidates per task; MetaSchedule's LocalBuilder spends about 12 s per batch starting
a worker pool that imports the tensor intrinsics again. Building here costs only the compile (25-140 ms). The risk
is that a candidate that crashes at run time takes the process with it: candidates here come from traces that
already ran on another workload and passed the postprocessors, which makes that rare.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import tvm
from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument
from tvm.target import Target

from registry.tvm_side.builder import build_module
from registry.tvm_side.compat import TVM_ERRORS, unpin


@dataclass(frozen=True)
class Timing:
    """Seconds per run, ``repeat`` samples; what a MetaSchedule record keeps as ``run_secs``."""

    run_secs: tuple[float, ...]

    @property
    def median_us(self) -> float:
        return statistics.median(self.run_secs) * 1e6


def median_us(timing: Timing | None) -> float | None:
    """A timing's median in µs, None for a kernel that did not build or run."""
    return None if timing is None else timing.median_us


def measure(
    rt_mod: tvm.runtime.Module, mod: IRModule, *, repeat: int = 5, min_repeat_ms: int = 20, number: int = 1
) -> Timing:
    """Time the kernel on random inputs: ``repeat`` samples, each long enough to be above timer noise."""
    func = next(iter(mod.functions.values()))
    args_info = [a.as_json() for a in ArgInfo.from_prim_func(func)]
    dev = tvm.cpu()
    (args,) = default_alloc_argument(dev, args_info, 1)
    evaluator = rt_mod.time_evaluator(rt_mod.entry_name, dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    try:
        return Timing(tuple(float(s) for s in evaluator(*args).results))
    finally:
        unpin()  # running a kernel starts TVM's thread pool, which pins this thread to one core


def build_and_measure(mod: IRModule, target: Target, **measure_args) -> Timing | None:
    """The kernel's timing, or None when it does not build or run."""
    try:
        rt_mod = build_module(mod, target)
        return measure(rt_mod, mod, **measure_args)
    except TVM_ERRORS:
        return None
