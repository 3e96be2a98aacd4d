"""Work-arounds for TVM 0.27 behaviour that bites a long-lived process."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import platform
import sys

from registry.tvm_side.cpus import unpin

META_SCHEDULE_LOGGER = "tvm.s_tir.meta_schedule"


def prepare_tuning(target_kind: str = "llvm") -> None:
    """Call before each ``tune_relax``: undo TVM's pinning (``cpus.unpin``), load only this target's tensor
    intrinsics (see load_tensor_intrinsics), and drop unnamed handlers from MetaSchedule's logger.

    tune_relax rebuilds its logging config from the *names* of the handlers already on its logger. A handler without
    a name there (a host application's, such as pytest's log capture) makes the second tune_relax of a process fail
    with ``AttributeError: 'NoneType' object has no attribute 'format'``.
    """
    unpin()
    load_tensor_intrinsics(target_kind)
    logger = logging.getLogger(META_SCHEDULE_LOGGER)
    for handler in list(logger.handlers):
        if handler.get_name() is None:
            logger.removeHandler(handler)


# What a failed TVM call raises: the FFI maps C++ errors onto these built-in kinds (TVM 0.27 has no TVMError).
TVM_ERRORS = (RuntimeError, ValueError, TypeError, IndexError)


def error_line(error: BaseException) -> str:
    """The line of a TVM error worth showing a user: TVM puts a C++ backtrace first and the message last."""
    return last_line(str(error), type(error).__name__)


def last_line(text: str | None, default: str) -> str:
    """The last non-blank line of a TVM message (a builder's or runner's error text, or an error's), else default."""
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else default


_INTRINSICS = "tvm.s_tir.tensor_intrin"
# The tensor intrinsics a CPU of this architecture can use; CUDA's are the slow ones (30 s of a 54 s import here).
_CPU_INTRINSICS = {"x86_64": ("x86",), "AMD64": ("x86",), "aarch64": ("arm_cpu",), "arm64": ("arm_cpu",)}


def load_tensor_intrinsics(target_kind: str) -> None:
    """Register only the tensor intrinsics that ``target_kind`` on this machine can use.

    ``import tvm.s_tir.tensor_intrin`` parses every target's intrinsics in TVMScript, which takes most of a minute on
    a small CPU (docs/BENCHMARKS.md, "Transfer-tuning"), and TuneContext runs it on first use. Here the package is
    put in place without its ``__init__``, and only the relevant submodules run, so later imports of the package cost
    nothing. Call it before the first TuneContext for each target kind: a process that tuned for CUDA and then tunes
    for this CPU needs the CPU's intrinsics registered too.
    """
    package = sys.modules.get(_INTRINSICS)
    if package is None:
        spec = importlib.util.find_spec(_INTRINSICS)
        package = importlib.util.module_from_spec(spec)
        sys.modules[_INTRINSICS] = package  # without running __init__, which imports every target's intrinsics
    wanted = ("cuda",) if target_kind == "cuda" else _CPU_INTRINSICS.get(platform.machine(), ())
    for name in wanted:
        if not hasattr(package, name):  # each submodule registers its intrinsics once, on import
            setattr(package, name, importlib.import_module(f"{_INTRINSICS}.{name}"))
