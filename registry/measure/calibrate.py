"""Choosing how many candidates to measure at once on this machine (DOPpler's degree of parallelism).

The first batch of real candidates is the probe: a sample of it is timed one at a time, then ``d`` at a time for
``d`` = 2, 4, 8, ... up to what the cores hold (``d x threads <= cores``), until one interferes. Interference at
``d`` is the largest, over the sample, of each candidate's latency at ``d`` over its latency alone: memory-bound
candidates barely notice a neighbour while vectorized ones slow down 2x, and every candidate's measurement has to
hold. The chosen degree is the largest ``d`` whose interference stays within ``tolerance``.

Real candidates, not a fixed kernel, because interference depends on what runs: where two vCPUs are one core's
hyperthreads, a naive matmul runs as fast two at a time while vectorized tuned candidates run about 2x slower
(docs/BENCHMARKS.md, "Evidence behind the code's rules").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

TOLERANCE = 0.05  # 5% slower under concurrency is where measurements stop being comparable
SAMPLE = 6  # candidates of the first batch used as the probe


@dataclass
class Calibration:
    dop: int
    seconds: float
    # (concurrent measurements, interference = the largest latency at d / latency alone in the sample)
    table: list[tuple[int, float]] = field(default_factory=list)

    def summary(self) -> str:
        parts = ", ".join(f"{d} at once: {x:.2f}x" for d, x in self.table)
        return f"degree of parallelism {self.dop} ({parts})"


def calibrate(
    measure_at: Callable[[int, list], list[float]],
    probe: list,
    max_dop: int,
    tolerance: float = TOLERANCE,
) -> tuple[Calibration, list[float]]:
    """``measure_at(d, items)`` times ``items`` ``d`` at a time and returns seconds (inf for a failure). Returns the
    calibration and the probe's latencies alone, which are real measurements the caller can keep."""
    start = time.perf_counter()
    alone = measure_at(1, probe)
    table = [(1, 1.0)]
    chosen = 1
    usable = [i for i, s in enumerate(alone) if s != float("inf")]
    for d in _degrees(max_dop):
        if not usable:
            break
        # d candidates at once, at least the whole usable probe; a small probe is cycled to fill d slots
        picked = [usable[j % len(usable)] for j in range(max(d, len(usable)))]
        together = measure_at(d, [probe[i] for i in picked])
        ratios = [t / alone[i] for t, i in zip(together, picked, strict=True) if t != float("inf")]
        if not ratios:
            break
        interference = max(ratios)
        table.append((d, interference))
        if interference > 1 + tolerance:
            break  # interference only grows with more at once: larger degrees are not worth probing
        chosen = d
    return Calibration(chosen, time.perf_counter() - start, table), alone


def _degrees(max_dop: int) -> list[int]:
    """2, 4, 8, ... up to ``max_dop``, and ``max_dop`` itself: a 16-core machine is probed in 4 rounds, not 15."""
    degrees = []
    d = 2
    while d < max_dop:
        degrees.append(d)
        d *= 2
    if max_dop >= 2:
        degrees.append(max_dop)
    return degrees
