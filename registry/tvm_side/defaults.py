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
    """``mod`` (one task's PrimFunc) as it runs without a record on ``target``. ``mod`` itself is left as it was."""
    if not is_gpu(target):
        return mod
    from tvm.s_tir import dlight as dl

    # DLight's pass writes its schedules into the module it is given and returns that same object. Given the task's
    # own module, it would turn every CUDA task into DLight's output before tuning and transfer read it, and their
    # traces would begin on blocks ("lv21_reindex_pad_shared") that the stored workload does not have. A clone is a new
    # module holding the same functions, so the pass rewrites only the clone.
    with target:
        return dl.ApplyDefaultSchedule(
            dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
        )(mod.clone())


def default_trace(mod: IRModule, target: Target) -> list | None:
    """The default schedule as a record's trace, where it is one. On a CPU the default is the task as TVM lowers
    it: a trace that changes nothing (one lookup of its root block; the store refuses empty traces), which replays on
    the stored workload like any other. On a GPU the default is DLight's, which is not a trace: None (and None for a
    function without a root block, which TVM's own lowering always gives)."""
    if is_gpu(target):
        return None
    from tvm.s_tir.schedule import Schedule

    from registry.tvm_side.apply_trace import trace_json
    from registry.tvm_side.compat import TVM_ERRORS

    sch = Schedule(mod)
    try:
        sch.get_sblock("root")
    except TVM_ERRORS:
        return None
    return trace_json(sch)
