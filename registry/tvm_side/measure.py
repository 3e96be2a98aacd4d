"""End-to-end latency of a compiled model, measured the way MetaSchedule measures candidates."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from registry.tvm_side.compat import unpin
from registry.tvm_side.frontend import LoadedModel


def model_latency_ms(executable, model: LoadedModel, *, repeat: int = 7, min_repeat_ms: int = 50) -> float:
    """Median over ``repeat`` timings, in milliseconds, on the CPU. Each timing runs the model as many times as fit
    in ``min_repeat_ms``: a model that runs in microseconds is otherwise all timer noise."""
    dev = tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    rng = np.random.default_rng(0)
    inputs = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32"), dev) for s in model.input_shapes.values()]
    timer = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    try:
        return float(np.median(timer(*inputs).results) * 1e3)
    finally:
        unpin()  # running the model started TVM's thread pool, which pinned this thread to one core
