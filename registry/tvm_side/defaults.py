"""What a task runs without a record: its "before", and what compilation falls back to.

On a CPU that is the task as TVM lowers it, naive loops (``compile_relax`` applies no default schedule there). On a
GPU an unscheduled kernel cannot run at all (nothing binds its loops to threads), so the default is DLight's GPU
rules, the same ``compile_relax`` applies to the functions a database has no record for.
"""

from __future__ import annotations

from tvm.ir import IRModule
from tvm.target import Target


def is_gpu(target: Target) -> bool:
    return "gpu" in {str(k) for k in target.keys}


def default_schedule(mod: IRModule, target: Target) -> IRModule:
    """``mod`` (one task's PrimFunc) as it runs without a record on ``target``."""
    if not is_gpu(target):
        return mod
    from tvm.s_tir import dlight as dl

    with target:
        return dl.ApplyDefaultSchedule(
            dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
        )(mod)
