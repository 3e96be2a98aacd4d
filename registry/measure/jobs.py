"""Measurement jobs made from TVM objects: a kernel from its scheduled module or built library, a model from its
compiled executable."""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import tvm
from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from registry.measure.inputs import argument_bounds
from registry.measure.types import MODEL, UNTUNED, KernelJob, Measurement, ModelJob
from registry.tvm_side.compile import scheduled_arguments
from registry.tvm_side.onnx_inputs import Bound, ModelInput

if TYPE_CHECKING:
    from registry.measure.measurer import Measurer


def _main(mod: IRModule):
    return next(iter(mod.functions.values()))


def kernel_arguments(mod: IRModule) -> tuple[tuple, tuple[Bound | None, ...]]:
    """A workload's arguments as ArgInfo JSON, and the values each integer argument may take. The schedules of one
    workload share them (but see ``scheduled_arguments``), so callers compute this once per task."""
    func = _main(mod)
    return tuple(a.as_json() for a in ArgInfo.from_prim_func(func)), tuple(argument_bounds(func))


def module_job(mod: IRModule, target: Target, arguments: tuple | None = None) -> KernelJob:
    """A scheduled module, to be built and timed by the worker; ``arguments``: its workload's, if known."""
    args, bounds = scheduled_arguments(arguments, mod) if arguments else kernel_arguments(mod)
    return KernelJob(args, bounds, module=tvm.ir.save_json(mod), target=str(target))


def traced_job(workload_json: str, trace: list, target: Target, arguments: tuple) -> KernelJob:
    """A stored record: its trace applied to its workload, then built and timed, all in the worker."""
    args, bounds = arguments
    return KernelJob(args, bounds, module=workload_json, target=str(target), trace=trace)


def artifact_job(path: str, arguments: tuple) -> KernelJob:
    """A kernel already built into a shared library (by the builder pool)."""
    args, bounds = arguments
    return KernelJob(args, bounds, artifact=path)


@contextmanager
def model_job(executable, inputs: list[ModelInput], keep: str | None = None) -> Iterator[ModelJob]:
    """A compiled Relax executable exported as a shared library the worker loads; to ``keep`` if given (the user's
    ``-o``), else to a temporary file removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="registry-model-") as tmp:
        path = keep or os.path.join(tmp, "model.so")
        executable.export_library(path)
        yield ModelJob(path, tuple(inputs))


def time_model(measurer: Measurer, executable, inputs: list[ModelInput], keep: str | None = None) -> Measurement:
    """A compiled model's end-to-end latency, measured by ``measurer``'s workers (see ``model_job``)."""
    with model_job(executable, inputs, keep) as job:
        return measurer.model(job, MODEL)


def before_and_after(
    measurer: Measurer, before: ModelJob, after, inputs: list[ModelInput], first: Measurement, keep: str | None = None
) -> tuple[Measurement, Measurement]:
    """Two builds of one model (``before``: the untuned one's library, already timed once as ``first``; ``after``: the
    final executable, exported to ``keep`` if given): ``after`` is timed, then ``before`` again, and ``before``'s two
    timings are pooled. Their ratio is what a report claims, and a shared machine's speed drifts by tens of percent
    within a minute: timed a compile apart, once each, two identical builds can differ by half (docs/BENCHMARKS.md,
    "Evidence behind the code's rules"). Timing ``before`` on both sides of ``after`` makes a drift hit both alike,
    for one timing more."""
    final = time_model(measurer, after, inputs, keep)
    if not first.ok:
        return first, final
    return _pooled(first, measurer.model(before, UNTUNED)), final


def _pooled(a: Measurement, b: Measurement) -> Measurement:
    """Two timings of one build as one: every sample, or the first failure."""
    for m in (a, b):
        if not m.ok:
            return m
    return Measurement(a.run_secs + b.run_secs)


def interleaved_model_ms(
    measurer: Measurer, executables: dict[str, object], inputs: list[ModelInput], rounds: int = 3
) -> dict[str, float | None]:
    """Several builds of one model timed in turn, ``rounds`` times, medians in ms (None: it did not run). Interleaving
    makes a drift of the machine hit every build alike, so their ratios hold even where absolute times wander."""
    samples: dict[str, list[float]] = {k: [] for k in executables}
    with contextlib.ExitStack() as stack:
        jobs = {k: stack.enter_context(model_job(exe, inputs)) for k, exe in executables.items()}
        for _ in range(rounds):
            for key, job in jobs.items():
                m = measurer.model(job)
                if m.ok:
                    samples[key].append(m.median_s * 1e3)
    return {k: statistics.median(v) if v else None for k, v in samples.items()}
