"""The plain data of the measurement interface: what is measured, how, and what came of it. No TVM here."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from registry.tvm_side.onnx_inputs import Bound, ModelInput


@dataclass(frozen=True)
class Settings:
    """How long to time: ``repeat`` samples, each running the kernel ``number`` times and at least ``min_repeat_ms``;
    a model whose first sample says the ``repeat`` would take more than ``enough_s`` keeps that one sample."""

    number: int = 1
    repeat: int = 3
    min_repeat_ms: int = 10
    cache_flush: bool = False
    enough_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {"number": self.number, "repeat": self.repeat, "min_repeat_ms": self.min_repeat_ms,
                "cache_flush": self.cache_flush, "enough_s": self.enough_s}  # fmt: skip

    def runner_config(self) -> dict[str, Any]:
        """The same settings as MetaSchedule's ``EvaluatorConfig`` arguments (to compare with its runners)."""
        return {"number": self.number, "repeat": self.repeat, "min_repeat_ms": self.min_repeat_ms,
                "enable_cpu_cache_flush": self.cache_flush}  # fmt: skip


# Quick: enough to rank candidates. Precise: what a record that may become a task's best is filed with, and what
# transfer compares a task's schedules by. Model: a whole model end to end, long enough that a model running in
# microseconds is not timer noise.
QUICK = Settings(number=1, repeat=3, min_repeat_ms=10)
# Screen: a one-sided check ("no slower than claimed") whose failures are timed again precisely (``registry verify``).
# TVM's evaluator overshoots min_repeat_ms by half on average, so QUICK spends about 50 ms per kernel here; 4 ms per
# sample is still thousands of runs of a microsecond kernel, and half the cost.
SCREEN = Settings(number=1, repeat=3, min_repeat_ms=4)
PRECISE = Settings(number=1, repeat=5, min_repeat_ms=20)
MODEL = Settings(number=1, repeat=7, min_repeat_ms=50)
# The untuned model: it only sets a report's "before", timed on both sides of the final model and pooled (six samples).
# Naive loops over a detector's 416x416 maps run 2.7 s a call, and MODEL's seven samples of it, twice, were 40 s of a
# first transfer; at three samples a side, 24 s of a 289-s one. A model that slow is sampled once a side (after its
# warm-up call): a ratio of 50 to the tuned model is not changed by a percent of noise.
UNTUNED = Settings(number=1, repeat=3, min_repeat_ms=50, enough_s=2.0)


@dataclass(frozen=True)
class KernelJob:
    """One kernel to time: a built shared library (``artifact``), or a scheduled IRModule (``module``, its JSON) that
    the worker builds for ``target`` first; with ``trace``, ``module`` is a workload and that stored trace is applied
    to it in the worker before the build (a stored trace never runs in the caller). ``args`` is MetaSchedule's ArgInfo
    JSON list; ``bounds`` gives, per argument, the values of an integer argument (None: not an integer, random
    values)."""

    args: tuple[Any, ...]
    bounds: tuple[Bound | None, ...]
    artifact: str | None = None
    module: str | None = None
    target: str | None = None  # the target's JSON, for ``module``
    trace: list | None = None  # a stored record's trace JSON, for ``module``

    def as_json(self) -> dict[str, Any]:
        return {
            "args": list(self.args),
            "bounds": [None if b is None else [b.low, b.high] for b in self.bounds],
            "artifact": self.artifact,
            "module": self.module,
            "target": self.target,
            "trace": self.trace,
        }


@dataclass(frozen=True)
class ModelJob:
    """A compiled model (a Relax executable exported as a shared library) to time end to end on ``inputs``."""

    artifact: str
    inputs: tuple[ModelInput, ...]

    def as_json(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "inputs": [i.as_json() for i in self.inputs]}


@dataclass(frozen=True)
class Measurement:
    """Seconds per run, one per sample, as a MetaSchedule record keeps them; or why there are none."""

    run_secs: tuple[float, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.run_secs)

    @property
    def median_s(self) -> float:
        return statistics.median(self.run_secs) if self.ok else float("inf")

    @property
    def median_us(self) -> float | None:
        return statistics.median(self.run_secs) * 1e6 if self.ok else None

    @property
    def mean_us(self) -> float | None:
        """What the store ranks a record by (the mean of its run_secs), in µs."""
        return sum(self.run_secs) / len(self.run_secs) * 1e6 if self.ok else None


def failed(reason: str) -> Measurement:
    return Measurement((), reason)


@dataclass(frozen=True)
class DeviceDescription:
    """What a measuring process reports about where it runs; the device records are filed under comes from it."""

    kind: str  # "cpu" or "cuda"
    model: str  # the CPU's or GPU's name
    threads: int  # the TVM runtime's thread count
    tvm_version: str
    details: dict[str, Any] = field(default_factory=dict)  # triple, mcpu, compute version, driver ...
