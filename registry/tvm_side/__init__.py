"""TVM adapters: the ONNX frontend and its preparation, signatures, targets, trace application and replay, the build
function, DLight's defaults, the predictor model and its stored format, TVM's log format, models built in code.

May import ``registry.store`` only (and the base helpers).
"""

# Before any module of this package imports TVM, whose runtime pins this thread to one core: see cpus.
from registry.tvm_side import cpus  # noqa: F401
