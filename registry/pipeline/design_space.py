"""Samples of a workload's design spaces: schedules whose every decision is drawn anew (MetaSchedule's ``ReplayTrace``).

What a predictor ranks where no stored schedule applies (``registry transfer --no-measure``, One-Shot Tuner's way),
and what the predictor's dataset is made of (``bench/predictor/collect.py``, TenSet's way).
"""

from __future__ import annotations

from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.target import Target

from registry.pipeline.rules import rules_with_producers_inlined
from registry.store.traces import record_trace_hash
from registry.tvm_side.apply_trace import trace_json
from registry.tvm_side.compat import TVM_ERRORS

# Failed draws ReplayTrace tolerates per candidate (a draw fails where a postprocessor rejects its decisions).
MAX_FAILURES = 50


def _tune_context(mod: IRModule, target: Target, task_name: str, seed: int) -> tuple[ms.TuneContext, list]:
    """The workload's TuneContext with a ReplayTrace search, and its design spaces: MetaSchedule's rules, else the
    registry's fallback rules where those fail (as ``registry tune`` does). Raises ValueError when neither builds."""
    for generator in ("post-order-apply", None):
        if generator is None:
            generator = ms.space_generator.PostOrderApply(
                sch_rules=rules_with_producers_inlined(target), postprocs="from-target", mutator_probs="from-target"
            )
        context = ms.TuneContext(
            mod=mod,
            target=target,
            space_generator=generator,
            search_strategy=ms.search_strategy.ReplayTrace(max_fail_count=MAX_FAILURES),
            task_name=task_name,
            rand_state=seed,
            num_threads=1,
        )
        try:
            return context, context.generate_design_space()
        except TVM_ERRORS:
            continue
    raise ValueError("no design space could be generated")


def sample(
    mod: IRModule, target: Target, task_name: str, count: int, seed: int, seen: set[str] | None = None
) -> list[tuple[MeasureCandidate, list]]:
    """Up to ``count`` distinct schedules of ``mod`` with their traces, none whose trace hash is in ``seen`` (which
    gains the new ones). Raises ValueError when the workload has no design space, and what TVM raises
    (``compat.TVM_ERRORS``) where sampling it fails."""
    seen = set() if seen is None else seen
    context, spaces = _tune_context(mod, target, task_name, seed)
    context.pre_tuning(
        max_trials=count * 2, num_trials_per_iter=count * 2, design_spaces=spaces, database=None, cost_model=None
    )
    try:
        proposed = context.generate_measure_candidates() or []
    finally:
        context.post_tuning()
    kept = []
    for candidate in proposed:
        trace = trace_json(candidate.sch)
        key = record_trace_hash(trace)
        if key not in seen:
            seen.add(key)
            kept.append((candidate, trace))
        if len(kept) == count:
            break
    return kept
