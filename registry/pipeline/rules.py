"""A schedule rule that lets MetaSchedule tune fused workloads its own rules fail on.

HuggingFace BERT-family exports fuse the attention scores' matmul with the mask: ``matmul -> add(where(mask))``,
where the ``where`` block reads only the function's inputs. MetaSchedule's MultiLevelTiling visits the matmul first
and fuses its consumer (the add) under the tiled loops, which TVM refuses while the add's other producer (the
``where``) is not under them: "The primitive requires all the producer(s) of the given block to be present under the
target loop". Generating the design space fails, and the task, two of a BERT layer's heaviest, stays naive.

``InlineInputOnlyProducers`` runs before the default rules and inlines such blocks (spatial, reading only inputs,
feeding another block) into their consumers, which is what AutoInline would have done had it come first. The trace
records it as ordinary ``compute_inline`` instructions on the original workload, so records apply as any other. The
engine uses it only for tasks whose default design space fails.
"""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule, ScheduleRule
from tvm.s_tir.schedule import Schedule
from tvm.target import Target

from registry.tvm_side.compat import TVM_ERRORS

_SPATIAL = 0  # IterVar.DataPar


@derived_object
class InlineInputOnlyProducers(PyScheduleRule):
    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch: Schedule, block) -> list[Schedule]:
        for candidate in sch.get_child_blocks(sch.get_sblock("root")):
            stmt = sch.get(candidate)
            if any(int(iv.iter_type) != _SPATIAL for iv in stmt.iter_vars):
                continue
            if sch.get_producers(candidate) or not sch.get_consumers(candidate):
                continue
            try:
                sch.compute_inline(candidate)
            except TVM_ERRORS:
                pass  # not inlinable (e.g. it writes an output): the default rules see it as it is
        return [sch]

    def clone(self) -> ScheduleRule:
        return InlineInputOnlyProducers()


def rules_with_producers_inlined(target: Target) -> list[ScheduleRule]:
    return [InlineInputOnlyProducers(), *ScheduleRule.create(target.kind.name)]
