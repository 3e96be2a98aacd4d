"""TVM adapters: the ONNX frontend and its preparation, signatures, targets, trace application and replay, the build
function, DLight's defaults, the predictor model and its stored format, TVM's log format, models built in code.

May import ``registry.store`` only (and the base helpers). The CPU affinity is captured here, before TVM loads: TVM's
runtime pins the calling thread to one core the first time its thread pool starts, and every process spawned
afterwards would inherit that single core (``registry.tvm_side.compat.unpin``).
"""

from __future__ import annotations

import os

ORIGINAL_AFFINITY = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
