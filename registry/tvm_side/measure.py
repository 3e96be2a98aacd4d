"""End-to-end latency of a compiled model, measured the way MetaSchedule measures candidates."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from registry.tvm_side.compat import unpin
from registry.tvm_side.frontend import LoadedModel


def _input(rng: np.random.Generator, shape: list[int], dtype: str) -> np.ndarray:
    """Random floats; zeros for integer inputs, which are usually indices (token ids) that must stay in range."""
    if np.issubdtype(np.dtype(dtype), np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def model_latency_ms(executable, model: LoadedModel, *, repeat: int = 7, min_repeat_ms: int = 50) -> float:
    """Median over ``repeat`` timings, in milliseconds, on the CPU. Each timing runs the model as many times as fit
    in ``min_repeat_ms``: a model that runs in microseconds is otherwise all timer noise."""
    dev = tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    rng = np.random.default_rng(0)
    inputs = [
        tvm.runtime.tensor(_input(rng, shape, model.input_dtypes.get(name, "float32")), dev)
        for name, shape in model.input_shapes.items()
    ]
    timer = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    try:
        return float(np.median(timer(*inputs).results) * 1e3)
    finally:
        unpin()  # running the model started TVM's thread pool, which pinned this thread to one core
