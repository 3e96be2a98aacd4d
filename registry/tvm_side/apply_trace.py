"""A donor's trace applied to another workload: the candidate schedules of transfer-tuning.

A stored trace is ``[instructions, decisions]`` and ends with the postprocessors' instructions (after an
``EnterPostproc`` marker). Those are specific to the donor's loop nest, so they are cut and the target's
postprocessors run again on the new workload. Two ways to apply what is left:

1. Replay the instructions on the new workload. It works when both have the same blocks (the same operator at other
   shapes). Tile decisions that do not divide the new extents are rewritten by TVM (M=100 with ``[2,4,2,4]`` becomes
   ``[1,1,25,4]``); with ``resample=True`` the decisions are dropped and sampled afresh from ``seed`` instead.
2. Anchor-trace application (``schedule_using_anchor_trace``): the donor's schedule of its anchor block (the conv or
   matmul) is applied to the new workload's anchor, and the other blocks are inlined or parallelized. It serves fused
   variants, e.g. a conv2d+add+relu donor for a conv2d+add.

Every function here first checks the trace as far as its own instructions tell (``registry.store.validation``): a stored
row need not have come through the registry's checks, and TVM trusts a trace's decision indices blindly.
"""

from __future__ import annotations

from typing import Any

from tvm.ir import IRModule
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.postproc import Postproc
from tvm.s_tir.meta_schedule.space_generator import PostOrderApply
from tvm.s_tir.meta_schedule.trace_apply import schedule_using_anchor_trace
from tvm.s_tir.schedule import Schedule, Trace
from tvm.target import Target

from registry.store.validation import trace_is_sound
from registry.tvm_side.compat import TVM_ERRORS, load_tensor_intrinsics

_POSTPROC_MARKER = "EnterPostproc"


def without_postproc(trace: list[Any]) -> list[Any]:
    """The trace JSON up to its ``EnterPostproc`` instruction, with the decisions of the instructions kept."""
    insts, decisions = trace
    cut = next((i for i, inst in enumerate(insts) if inst[0] == _POSTPROC_MARKER), len(insts))
    return [insts[:cut], [d for d in decisions if d[0] < cut]]


def _postprocs(mod: IRModule, target: Target) -> list[Postproc]:
    """The target's default postprocessors, initialized for this task (some read the target's core count).

    RewriteTensorize is left out (``Postproc.create`` omits it): a donor trace that tensorizes does not transfer.
    """
    load_tensor_intrinsics(target.kind.name)
    space = PostOrderApply(sch_rules=[], postprocs=Postproc.create(target.kind.name), mutator_probs={})
    context = TuneContext(mod=mod, target=target, space_generator=space, task_name="transfer")
    return list(context.space_generator.postprocs)


def finished(sch: Schedule, mod: IRModule, target: Target) -> Schedule | None:
    """``sch`` (a schedule of ``mod``) after the target's postprocessors, as a search's candidates are; None where one
    refuses it."""
    sch.enter_postproc()
    for postproc in _postprocs(mod, target):
        if not postproc.apply(sch):
            return None
    return sch


def replay(
    mod: IRModule, target: Target, trace: list[Any], *, resample: bool = False, seed: int = 1
) -> Schedule | None:
    """Method 1 above; None when the donor's instructions do not fit this workload's blocks."""
    if not trace_is_sound(trace):
        return None
    insts, decisions = without_postproc(trace)
    sch = Schedule(mod, seed=seed)
    try:
        Trace.apply_json_to_schedule([insts, [] if resample else decisions], sch)
        return finished(sch, mod, target)
    except TVM_ERRORS:
        return None


def via_anchor(mod: IRModule, target: Target, donor_mod: IRModule, trace: list[Any], seed: int = 1) -> Schedule | None:
    """Method 2 above. ``donor_mod`` is the donor's workload: a Trace object is rebuilt on it first."""
    if not trace_is_sound(trace):
        return None
    try:
        donor = Schedule(donor_mod, seed=seed)
        Trace.apply_json_to_schedule(without_postproc(trace), donor)
        sch = Schedule(mod, seed=seed)
        schedule_using_anchor_trace(sch, donor.trace, target)
        return finished(sch, mod, target)
    except TVM_ERRORS:
        return None


def as_stored(mod: IRModule, trace: list[Any], base: Schedule | None = None) -> Schedule | None:
    """A stored record's own trace (postprocessors included) applied to its own workload, as compilation does. With
    ``base`` (``replay.pristine(mod)``, for many traces of one workload) it starts from a copy of that schedule."""
    if not trace_is_sound(trace):
        return None
    sch = base.copy() if base is not None else Schedule(mod, seed=1)
    try:
        Trace.apply_json_to_schedule(trace, sch)
    except TVM_ERRORS:
        return None
    return sch


def trace_json(sch: Schedule) -> list[Any]:
    """The schedule's trace as a record stores it: instructions, then decisions, postprocessors included."""
    from registry.tvm_side.signature import plain_json

    return plain_json(sch.trace.as_json())


def schedule_text(mod_json: str, trace_json: str, *, workload: str, record_id: int) -> tuple[str, str]:
    """(TVMScript of the scheduled module, the trace as Python) of a stored record: its workload's module and its
    trace, as ``RecordProvenance`` holds them. What ``registry show`` prints and the server's workload page shows.
    BadInputError when it does not load or replay."""
    import json

    import tvm

    from registry.errors import BadInputError

    try:
        mod = tvm.ir.load_json(mod_json)
    except TVM_ERRORS as e:
        raise BadInputError(f"workload {workload} does not load on this TVM ({type(e).__name__})") from None
    sch = as_stored(mod, json.loads(trace_json))
    if sch is None:
        raise BadInputError(f"record {record_id}'s trace does not replay on this TVM {tvm.__version__}")
    return sch.mod.script(), "\n".join(sch.trace.as_python(remove_postproc=False))
