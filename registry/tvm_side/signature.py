"""A workload's readable operator signature, and the WorkloadIn the store takes."""

from __future__ import annotations

import re

import tvm_ffi
from tvm.ir import IRModule
from tvm.s_tir.analysis import estimate_tir_flops, find_anchor_sblock
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

from registry import hostinfo
from registry.store.rows import Signature, WorkloadIn

# IterVar.iter_type: 0 data-parallel (spatial), 2 commutative reduce; the rest are rare in tuned tasks.
_ITER_KIND = {0: "S", 2: "R"}

# Checked in order against the anchor block's and the task's names: the first match names the operator.
_OP_PATTERNS = [
    ("conv2d_transpose", r"conv2d_transpose"),
    ("depthwise_conv2d", r"depthwise"),
    ("conv3d", r"conv3d"),
    ("conv2d", r"conv2d"),
    ("conv1d", r"conv1d"),
    ("batch_matmul", r"batch_matmul"),
    ("matmul", r"matmul"),
    ("dense", r"dense"),
    ("softmax", r"softmax"),
    ("layer_norm", r"layer_norm"),
    ("group_norm", r"group_norm"),
    ("pool", r"pool"),
]


def normalize_task_name(name: str) -> str:
    """Drop the per-model numbering Relax adds: "fused_conv2d13_add7_relu2" -> "fused_conv2d_add_relu"."""
    return "_".join(re.sub(r"(?<=[a-z])\d+$", "", part) for part in name.split("_"))


def block_names(mod: IRModule) -> list[str]:
    """Block names in program order. Read from the printed script: TVM 0.27 exposes no statement visitor to Python."""
    return [n for n in re.findall(r'T\.sblock\("([^"]+)"', mod.script()) if n != "root"]


def op_kind(anchor: str | None, task_name: str, is_reduction: bool) -> str:
    haystack = f"{anchor or ''} {task_name}".lower()
    for kind, pattern in _OP_PATTERNS:
        if re.search(pattern, haystack):
            return kind
    if anchor is None:
        return "injective"
    return "reduce" if is_reduction else "injective"


def signature(mod: IRModule, task_name: str | None = None) -> Signature:
    """Signature of a one-function task module, as MetaSchedule hands it to a database.

    Without ``task_name`` (MetaSchedule does not pass it to databases) one is derived from the block names.
    """
    anchor = find_anchor_sblock(mod)
    iters = [] if anchor is None else list(anchor.iter_vars)
    kinds = "".join(_ITER_KIND.get(int(iv.iter_type), "O") for iv in iters)
    extents = tuple(int(iv.dom.extent) for iv in iters)
    func = next(iter(mod.functions.values()))
    args = tuple((tuple(int(d) for d in a.shape), str(a.dtype)) for a in ArgInfo.from_prim_func(func))
    if task_name is None:
        parts = [re.sub(r"^T_", "", n) for n in block_names(mod) if n not in ("pad_temp", "compute")]
        task_name = "fused_" + "_".join(dict.fromkeys(parts)) if parts else "main"
    task_name = normalize_task_name(task_name)
    anchor_name = None if anchor is None else str(anchor.name_hint)
    return Signature(
        op_kind=op_kind(anchor_name, task_name, "R" in kinds),
        task_name=task_name,
        iter_kinds=kinds,
        extents=extents,
        args=args,
        flops=float(estimate_tir_flops(mod)),
    )


def structural_hash(mod: IRModule) -> str:
    return str(tvm_ffi.structural_hash(mod))


def args_info_json(mod: IRModule) -> list:
    func = next(iter(mod.functions.values()))
    return [plain_json(a.as_json()) for a in ArgInfo.from_prim_func(func)]


def plain_json(obj):
    """TVM FFI containers to plain JSON values."""
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, (int, float, bool)) or obj is None:
        return obj
    if hasattr(obj, "items"):
        return {str(k): plain_json(v) for k, v in obj.items()}
    if hasattr(obj, "__iter__"):
        return [plain_json(x) for x in obj]
    if hasattr(obj, "value"):
        return obj.value
    return obj


def workload_in(mod: IRModule, *, task_name: str | None = None, mod_json: str | None = None) -> WorkloadIn:
    """Everything the store keeps of a task module. ``mod_json`` saves re-serializing a module read from a log."""
    import tvm

    return WorkloadIn(
        shash=structural_hash(mod),
        mod_json=mod_json if mod_json is not None else tvm.ir.save_json(mod),
        args_info=args_info_json(mod),
        signature=signature(mod, task_name),
        tvm_version=hostinfo.tvm_version(),
    )
