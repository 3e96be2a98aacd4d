"""A scheduled module built for its target, as MetaSchedule's default builder does it, minus one import.

MetaSchedule's default build function imports ``tvm.s_tir.tensor_intrin``, which parses every target's tensor intrinsics
in TVMScript, which takes longer than the 30 s MetaSchedule gives a build on a small CPU (docs/BENCHMARKS.md,
"Transfer-tuning"). A tensorized schedule already has the intrinsic's body inlined into its IR by the time it is built,
so the registry of intrinsics is not needed. Run by the measurement workers (``registry.measure.worker``'s ``build`` and
``kernel``).
"""

from __future__ import annotations

from tvm.ir import IRModule
from tvm.runtime import Module
from tvm.target import Target

from registry.tvm_side import sigmoid  # noqa: F401  (registers TVM's sigmoid lowering: sigmoid.py)


def build_module(mod: IRModule, target: Target, _params=None) -> Module:
    """MetaSchedule's default build, minus the tensor-intrinsics import."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.tirx import build

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return build(mod, target=target)
