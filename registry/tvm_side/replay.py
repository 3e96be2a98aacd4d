"""Replaying a trace nobody has checked yet: what ``registry.records.replay_pool`` sends to worker processes.

Replaying a trace is the one place where a log's content reaches TVM's C++ before anything vouches for it: a crafted
instruction list could crash the process that replays it. So ``serve`` runs in a worker of the registry's worker pool
(``registry.measure.worker``'s ``replay`` op); a crash costs that worker, and the pool reports the trace that caused it.

A request is ``{"key": workload key, "mod_json": module JSON, "trace": [insts, decisions], "facts": bool}``; the reply
says whether the trace applies, whether TVM kept every decision, and, with ``facts``, each tile sampler's loop extent
(see ``_facts``).
"""

from __future__ import annotations

from typing import Any

TILE_KINDS = ("SamplePerfectTile", "SamplePartitionedTile")
# module key (workload and module digest) -> a schedule of the module that nothing is applied to, in the worker: each
# module is parsed once, and every replay starts from a copy of its schedule
_schedules: dict[str, Any] = {}


def serve(request: dict[str, Any]) -> dict[str, Any]:
    import tvm

    try:
        key = request["key"]
        if key not in _schedules:
            _schedules[key] = pristine(tvm.ir.load_json(request["mod_json"]))
        return replay(_schedules[key], request["trace"], request.get("facts", False))
    except Exception as e:  # noqa: BLE001 - one bad request must not end the worker
        return {"applies": False, "error": _line(e)}


def pristine(mod):
    """A schedule of ``mod`` to copy for each replay. ``Schedule.copy`` rebuilds the sref tree and leaves the module
    untouched (TVM's documented guarantee), in 35 µs where a new ``Schedule`` of a real task takes about 1 ms."""
    from tvm.s_tir.schedule import Schedule

    return Schedule(mod, seed=1)


def replay(base, trace: list, want_facts: bool) -> dict[str, Any]:
    """Apply ``trace`` (postprocessors included) to a copy of ``base`` (a ``pristine`` schedule) as compilation does,
    and compare TVM's decisions with the trace's: TVM silently rewrites tile sizes that do not divide the loop, and a
    compute location that is not one."""
    from tvm.s_tir.schedule import Trace

    sch = base.copy()
    try:
        Trace.apply_json_to_schedule(trace, sch)
    except Exception as e:  # noqa: BLE001 - TVM raises many kinds for a trace that does not fit
        return {"applies": False, "error": _line(e)}
    insts = trace[0]
    wanted = {int(i): v for i, v in trace[1]}
    kept = decisions(sch.trace)
    rewritten = sorted(i for i in wanted if kept.get(i) != wanted[i])
    reply: dict[str, Any] = {"applies": True, "rewritten": None, "locations_kept": True}
    if rewritten:
        i = rewritten[0]
        reply["rewritten"] = f"instruction {i} ({insts[i][0]}): TVM replays decision {wanted[i]} as {kept.get(i)}"
        reply["locations_kept"] = not any(insts[i][0] == "SampleComputeLocation" for i in rewritten)
    if want_facts and reply["locations_kept"]:
        reply["extents"], reply["dependent"] = _facts(base, sch.trace, insts)
        reply["flops"], reply["bits"] = work(base.mod)
    return reply


def work(mod) -> tuple[float, int]:
    """The module's floating-point operations, as a workload's signature counts them, and the narrowest element type
    of its arguments in bits (0.0 and 0 where TVM cannot tell): what bounds the latency a record of it can have."""
    from tvm.s_tir.analysis import estimate_tir_flops
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    try:
        args = ArgInfo.from_prim_func(next(iter(mod.functions.values())))
        return float(estimate_tir_flops(mod)), min((int(a.dtype.bits) for a in args), default=0)
    except Exception:  # noqa: BLE001 - a bound not known is no reason to refuse the record
        return 0.0, 0


def decisions(trace) -> dict[int, Any]:
    """The trace's decisions by instruction index, as plain values. Read from its decision map: ``trace.as_json()``
    serializes every instruction as well, which took 3 of a real CUDA replay's 10 ms."""
    from registry.tvm_side.signature import plain_json

    made = trace.decisions
    return {i: plain_json(made[inst]) for i, inst in enumerate(trace.insts) if inst in made}


def _facts(base, trace, insts: list) -> tuple[list[list], list[int]]:
    """Each tile sampler's loop extent (None: not a constant), and the samplers whose extent changed with the other
    decisions.

    The extent a tile sampler sees can depend on earlier decisions (a loop made by a compute-at under a tiled loop).
    So the instructions before the postprocessors are replayed three times with the compute locations kept: with
    the trace's own decisions, with every tile as ``[extent, 1, ..., 1]`` and every categorical choice its first,
    and with ``[1, ..., 1, extent]`` and every last choice. A sampler whose extent differs is dependent: records of
    this skeleton are then replayed one by one instead of checked against one extent.
    """
    runs = []
    for variant in ("own", "outer", "inner"):
        sch = base.copy()
        seen: dict[int, int | None] = {}
        position = [0]

        def provide(inst, inputs, attrs, decision, sch=sch, seen=seen, position=position, variant=variant):
            index = position[0]
            position[0] += 1
            kind = inst.kind.name
            if kind in TILE_KINDS:
                extent = sch.get(inputs[0]).extent
                seen[index] = int(extent.value) if hasattr(extent, "value") else None
                if variant != "own" and seen[index] is not None:
                    n = len(decision)
                    ones = [1] * (n - 1)
                    return [seen[index], *ones] if variant == "outer" else [*ones, seen[index]]
            elif kind == "SampleCategorical" and variant != "own":
                return 0 if variant == "outer" else len(attrs[0]) - 1
            return decision

        try:
            trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provide)
        except Exception:  # noqa: BLE001 - a variant TVM cannot apply says nothing either way: assume dependence
            return [], [i for i, inst in enumerate(insts) if inst[0] in TILE_KINDS]
        runs.append(seen)
    own = runs[0]
    dependent = sorted(i for i in own if any(run.get(i) != own[i] for run in runs[1:]))
    return [[i, e] for i, e in sorted(own.items()) if i not in dependent], dependent


def _line(error: BaseException) -> str:
    from registry.tvm_side.compat import error_line

    return error_line(error)[:200]
