"""Records for the kernels plain TVM extracts, so that an export serves ``compile_relax`` without the registry.

The registry tunes a model after rewriting it (``registry.tvm_side.compile.model_passes``), so its records are for
kernels plain TVM never makes: ``fast_erf`` where plain TVM keeps ``erf``, channels-last convolutions with weights in
the order of their schedule. ``registry transfer`` and ``tune`` record the kernels plain TVM extracts from the same
model beside the registry's own (``plain_task``, where they differ). For each of those without a record of its own on
the device, the registry's schedule of the same model is replayed on it (``apply_trace.replay``: the instructions up to
the postprocessors, which run again on the plain kernel; through the anchor block, or with the inlined elementwise
steps renamed, where the blocks differ), trying the model's kernels by name likeness and each one's
fastest records in turn; the first that applies gives the record, filed with its latency as measured on the
registry's kernel (plain TVM only ranks by it). A kernel none applies to (a convolution tuned channels-last with
layout-free weights has other loops) is counted, and the export's README says how to compile with the registry's
pipeline instead.
"""

from __future__ import annotations

import difflib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from registry.store.interface import RegistryReads, StoredWorkload

if TYPE_CHECKING:
    from tvm.target import Target

MAX_TRIES = 8  # the registry's kernels tried per plain one, likest name first
RECORDS_TRIED = 4  # each one's fastest records, in order: a best whose trace does not replay leaves the next


@dataclass
class PlainRecords:
    workloads: list[StoredWorkload] = field(default_factory=list)
    records: list[tuple[int, list[Any], list[float]]] = field(default_factory=list)  # (workload id, trace, run_secs)
    kernels: int = 0  # plain kernels that needed a record
    unusable: list[str] = field(default_factory=list)  # their task names, where no schedule of the model applied


def plain_records(store: RegistryReads, device_id: int, target: dict) -> PlainRecords:
    """Records for every stored model's plain kernels on the device ``device_id`` (target as its JSON). TVM is
    imported only where a stored model has such kernels: an export of other registries stays without it."""
    out = PlainRecords()
    by_model: dict[int, list] = defaultdict(list)
    for task in store.plain_tasks():
        by_model[task.model_id].append(task)
    if not by_model:
        return out
    from tvm.target import Target

    tvm_target = Target(target)
    plain_ids = sorted({t.workload_id for tasks in by_model.values() for t in tasks})
    modules = store.workloads_by_id(plain_ids)
    done: set[int] = set()
    for model_id, plain in by_model.items():
        donors = []
        ours = store.model_tasks(model_id)
        their_modules = store.workloads_by_id([t.workload_id for t in ours])
        for task in ours:
            fastest = store.top_k(task.workload_id, device_id, RECORDS_TRIED)
            if fastest and task.workload_id in their_modules:
                donor_mod = their_modules[task.workload_id].mod_json
                records = [(json.loads(r.trace_json), r.run_secs) for r in fastest]
                donors.append((task.task_name, records, donor_mod))
        for task in plain:
            if task.workload_id in done or task.workload_id not in modules:
                continue
            done.add(task.workload_id)
            if store.top_k(task.workload_id, device_id, 1):
                continue  # a record of its own (tuned with plain tune_relax): the export has it already
            out.kernels += 1
            found = _replayed(modules[task.workload_id], task.task_name, donors, tvm_target)
            if found is None:
                out.unusable.append(task.task_name)
                continue
            out.workloads.append(modules[task.workload_id])
            out.records.append((task.workload_id, *found))
    return out


def _replayed(workload: StoredWorkload, name: str, donors: list, target: Target):
    """(trace, run_secs) of the first donor schedule that applies to ``workload``: donors by name likeness, each
    one's records fastest first, replayed whole, through the anchor block (a matmul whose epilogue is ``erf`` here
    and ``fast_erf`` there) or with the elementwise steps it inlines renamed (``exp`` here, ``fast_exp`` there: the
    softmax, ``rebase.onto_inlined_steps``); or None."""
    import tvm

    from registry.records import rebase
    from registry.tvm_side import apply_trace

    mod = tvm.ir.load_json(workload.mod_json)
    likest = sorted(donors, key=lambda d: -difflib.SequenceMatcher(None, d[0], name).ratio())[:MAX_TRIES]
    for _, records, donor_json in likest:
        donor_mod = tvm.ir.load_json(donor_json)  # once for its records, not once a record
        for trace, run_secs in records:
            sch = apply_trace.replay(mod, target, trace)
            if sch is None:
                sch = apply_trace.via_anchor(mod, target, donor_mod, trace)
            if sch is None and (moved := rebase.onto_inlined_steps(trace, donor_json, workload.mod_json)):
                sch = apply_trace.replay(mod, target, moved)
            if sch is not None:
                return apply_trace.trace_json(sch), run_secs
    return None


README = """# Tuning records exported by `registry export -o`

Plain TVM loads them as they are:

    from tvm.s_tir import meta_schedule as ms
    ex = ms.relax_integration.compile_relax(ms.database.JSONDatabase(work_dir="{folder}"), mod, target, params)

{plain}
On a CPU the registry compiles erf, exp, tanh and softmax as TVM's fast approximations (within 4e-7 of exact); plain
TVM keeps libm's, one scalar call per element, and so stays slower however it is scheduled. TVM's own
`relax.transform.FastMathTransform()` applied to `mod` first gives plain TVM part of that back (the registry also
writes small integer powers as products, and converts convolutions, which no stock pass does).

The registry tunes a model after rewriting it (fast math, channels-last convolutions with layout-free weights), so
its own records are for those rewritten kernels. With the registry installed, two lines compile the model as the
registry does, and every record here applies:

    import registry.tvm_side.compile  # registers TVM's pipeline "registry"
    with target, ms.database.JSONDatabase(work_dir="{folder}"):
        ex = relax.build(mod, target, relax_pipeline=relax.get_pipeline("registry"))
"""


def readme(folder: str, found: PlainRecords) -> str:
    if not found.kernels:
        plain = "No stored model has kernels that plain TVM extracts differently from the registry.\n"
    else:
        plain = (
            f"Of the {found.kernels} kernels plain TVM extracts differently from the registry, "
            f"{found.kernels - len(found.unusable)} have the registry's schedule replayed on them here; "
            f"{len(found.unusable)} have none that applies ({', '.join(found.unusable[:5])}"
            f"{', ...' if len(found.unusable) > 5 else ''}): plain TVM compiles those with its default schedules.\n"
        )
    return README.format(folder=folder, plain=plain)
