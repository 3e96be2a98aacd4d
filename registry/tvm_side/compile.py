"""Where a model becomes tasks and, with a database's records, an executable: one place, so the two agree.

**Weight layouts (CPU).** onnxruntime packs a convolution's weights once, at session start, into the order its MLAS
kernels read them. TVM's tuned kernels read weights in ONNX's order unless the kernel marks its weight layout-free:
then MetaSchedule's ``RewriteLayout`` postprocessor has every candidate read the weight in the order of its own
tiling, and compiling splits that reordering off (``SplitLayoutRewritePreproc``) and folds it into the constant
(``FoldConstant``), so it costs nothing per call. Measured with plain ``tune_relax`` at the same trials: the ResNet's
convolutions 16% faster, the ViT's dense layers 16% slower (docs/BENCHMARKS.md, "MetaSchedule's layout rewrite"). So
only convolutions are marked.

**Channels last (CPU).** Before that, Relax's ``ConvertLayout`` makes every 2-d convolution NHWC (weights OHWI,
folded at compile time), as MLAS's NCHWc kernels block channels innermost: a tile of output channels is then
contiguous, where NCHW leaves MetaSchedule to vectorize along a row of pixels, 8 wide in a ResNet's last stage.
Elementwise operators follow the layout; a transpose back to NCHW is inserted where an operator has no layout rule,
and where that happens between convolutions the model keeps NCHW (``_channels_last``). At the corpus run's settings
the ResNet went from 1.85x onnxruntime to 1.10x (docs/BENCHMARKS.md, "Channels-last convolutions").

A marked kernel is another workload than the same kernel unmarked (the mark is an attribute of the function, which
the structural hash sees): records stored before serve it as transfer donors, whose postprocessors run again on it.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from registry.tvm_side.compat import TVM_ERRORS
from registry.tvm_side.transposes import (
    convolutions_nhwc,
    count_transposes,
    sink_transposes,
    unit_transposes_as_reshapes,
)

LAYOUT_FREE = "layout_free_buffers"  # the function attribute RewriteLayout reads (AttachAttrLayoutFreeBuffers')


def task_module(mod: IRModule, target: Target) -> IRModule:
    """The module MetaSchedule's tasks are extracted from: fused, and on a CPU with convolutions' weights
    layout-free. ``compile_model`` makes the same functions, so records found for these tasks apply there."""
    with target:
        return _layout_free_convolutions(_fused(mod, target), target)


def compile_model(database, mod: IRModule, target: Target):
    """``mod`` (as the frontend made it) compiled with ``database``'s records: MetaSchedule's ``compile_relax``, with
    the weight layouts of ``task_module`` and their reorderings folded into the weights."""

    @tvm.transform.module_pass(opt_level=3)
    def lowered(mod: IRModule, _ctx) -> IRModule:
        return tvm.transform.Sequential(lowering_passes(target))(with_records(mod, target))

    with target, database, tvm.transform.PassContext(opt_level=3):
        return relax.build(mod, target=target, relax_pipeline=lowered)


def with_records(mod: IRModule, target: Target) -> IRModule:
    """``mod`` fused into the kernels of ``task_module``, each replaced by the current database's best record (on a
    GPU, DLight's default schedule where there is none, as TVM does), weight reorderings folded into the weights.
    Run within the target's and the database's contexts."""
    from tvm.relax import pipeline
    from tvm.s_tir import dlight as dl

    mod = relax.transform.MetaScheduleApplyDatabase()(task_module(mod, target))
    if pipeline.BackendDispatcher.is_gpu_target(target):
        mod = dl.ApplyDefaultSchedule(
            dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
        )(mod)
    if not _layout_free_here(target):
        return mod
    # A kernel whose record reorders its weight now starts with the reordering: split it off into a function of its
    # own ("..._weight_prepack"), called on the constant weight, which folding then runs once, here.
    mod = relax.transform.SplitLayoutRewritePreproc()(mod)
    return relax.transform.FoldConstant()(mod)


def scheduled_arguments(arguments: tuple, scheduled: IRModule) -> tuple:
    """A scheduled kernel's arguments, given its workload's: the same, except in a kernel whose weights are
    layout-free. Its schedule reorders the weight into a layout of its own, and the kernel is built and timed reading
    that layout directly, as the compiled model runs it (the reordering folded into the constant), so the weight is
    passed in that layout's shape."""
    attrs = next(iter(scheduled.functions.values())).attrs
    if attrs is None or LAYOUT_FREE not in attrs:
        return arguments
    return tuple(a.as_json() for a in ArgInfo.from_entry_func(scheduled, remove_preproc=True)), arguments[1]


def _fused(mod: IRModule, target: Target) -> IRModule:
    """Operators lowered to TIR and fused into the kernels that become tasks, as ``compile_relax`` does it (not TVM's
    "zero" pipeline, which would also apply the current database, before the layouts are marked); on a CPU, 2-d
    convolutions channels-last first (see the module's docstring)."""
    from tvm.relax import pipeline

    try:
        dispatch = pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):  # a target TVM registers no dispatch for
        dispatch = []
    t = relax.transform
    passes = [
        *dispatch,
        t.LegalizeOps(),
        t.AnnotateTIROpPattern(),
        t.FoldConstant(),
        t.FuseOps(),
        t.FuseTIR(),
    ]
    return tvm.transform.Sequential(passes)(_channels_last(mod, target))


def _channels_last(mod: IRModule, target: Target) -> IRModule:
    """On a CPU, the model with its 2-d convolutions NHWC (weights OHWI), where that converts cleanly: every operator
    between the convolutions follows the layout, so that the only transposes left, once the weights' are folded, are
    at the model's inputs and outputs. Elsewhere, the model as it is.

    ``ConvertLayout`` wraps an operator it has no layout rule for in transposes to NCHW and back, and leaves some
    that need none between two transposes (a ConvNeXt's residual ``add``); ``sink_transposes`` then cancels those it
    can (ConvNeXt: 10 added, none after). Where transposes stay, around an operator Relax cannot see into (the
    ``topi.maximum``/``minimum`` kernels of an ONNX ``Clip`` with bound inputs, in a hard-swish), they cost more than
    the layout gains: a PaddleOCR classifier went from 1.04x onnxruntime to 1.73x (56 transposes added, 38 after
    sinking). Rewriting those kernels as Relax's ``maximum``/``minimum`` converted that classifier cleanly (2
    transposes), and it tuned to 1.47x, where NCHW had reached 1.03x (another day's run). So those kernels stay as the
    importer makes them, and keep such a model NCHW.

    Where ``ConvertLayout`` itself fails (magika: "Invalid SLayout", on an operator after its convolution), each
    convolution is converted on its own between two transposes (``convolutions_nhwc``), which sinking and
    ``unit_transposes_as_reshapes`` then reduce, and the same rule decides.
    """
    if not _layout_free_here(target):
        return mod
    try:
        converted = sink_transposes(relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod))
    except TVM_ERRORS:
        converted = unit_transposes_as_reshapes(sink_transposes(convolutions_nhwc(mod)))
    main = mod["main"]
    edges = len(main.params) + len(getattr(main.ret_ty, "fields", [main.ret_ty]))  # a tuple type lists its outputs
    return converted if count_transposes(converted) - count_transposes(mod) <= edges else mod


def _layout_free_convolutions(mod: IRModule, target: Target) -> IRModule:
    """On a CPU, every convolution kernel whose weight is a constant marked layout-free; other kernels unmarked."""
    if not _layout_free_here(target):
        return mod
    marked = relax.transform.AttachAttrLayoutFreeBuffers()(mod)
    for gv, func in list(marked.functions.items()):
        if isinstance(func, tvm.tirx.PrimFunc) and LAYOUT_FREE in (func.attrs or {}) and "conv" not in gv.name_hint:
            marked[gv] = func.without_attr(LAYOUT_FREE)
    return marked


def _layout_free_here(target: Target) -> bool:
    """RewriteLayout is a CPU postprocessor: on a GPU the mark would only change the kernels' hashes."""
    return target.kind.name == "llvm"


def lowering_passes(target: Target) -> list:
    """The passes after scheduling, as ``compile_relax`` runs them (its own list where TVM registers none for the
    target)."""
    from tvm.relax import pipeline

    try:
        return [*pipeline.dataflow_lower_passes(target), *pipeline.finalize_passes(target)]
    except (ValueError, AttributeError):
        t = relax.transform
        return [t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite(),
                t.StaticPlanBlockMemory(), t.LowerAllocTensor(), t.KillAfterLastUse(), t.LowerRuntimeBuiltin(),
                t.ComputePrimValue(), t.VMShapeLower(), t.AttachGlobalSymbol()]  # fmt: skip
