"""Where a model becomes tasks and, with a database's records, an executable: one place, so the two agree.

**One pipeline, every door.** The registry tunes a model after rewriting it (below: fast math, channels-last
convolutions, fusion, layout-free weights), so its records are for the rewritten kernels. ``model_passes`` is that
rewriting, one ``tvm.transform.Sequential``, and every door runs it: ``registry transfer`` and ``tune`` extract their
tasks with it (``task_module``), ``compile_model`` (the CLI's, and ``registry.compile_model`` for a module a user
made with ``from_onnx``) compiles with it, and TVM's own pipeline registry names the whole build
(``relax.get_pipeline("registry", target=...)``), so plain ``relax.build`` inside ``with database:`` gets the same
library. ``tune_relax`` given ``task_module(mod)`` tunes the same kernels; compile the module as it came.

**Fast math (CPU).** erf, exp, tanh and softmax become TVM's approximations, and powers by 2, 3 or 4 products
(``fast_math``), unless the caller asks for exact math: see ``fast_math``.

**Weight layouts (CPU).** onnxruntime packs a convolution's weights once, at session start, into the order its MLAS
kernels read them. TVM's tuned kernels read weights in ONNX's order unless the kernel marks its weight layout-free:
then MetaSchedule's ``RewriteLayout`` postprocessor has every candidate read the weight in the order of its own
tiling, and compiling splits that reordering off (``SplitLayoutRewritePreproc``) and folds it into the constant
(``FoldConstant``), so it costs nothing per call. At the same trials it makes convolutions faster and dense layers
slower (docs/BENCHMARKS.md, "MetaSchedule's layout rewrite"), so only convolutions are marked.

**Transposed convolutions (CPU).** One whose stride equals its kernel (a decoder's 2x2 upsampling) is the matrix
product it is, not TOPI's convolution over a zero-dilated input: ``transposed_convolutions``.

**Channels last (CPU).** Before that, Relax's ``ConvertLayout`` makes every 2-d convolution NHWC (weights OHWI,
folded at compile time), as MLAS's NCHWc kernels block channels innermost: a tile of output channels is then
contiguous, where NCHW leaves MetaSchedule to vectorize along a row of pixels, which is short in a CNN's last
stages. Elementwise operators follow the layout; a transpose back to NCHW is inserted where an operator has no layout
rule, and where such transposes between convolutions move much, the model keeps NCHW (``_channels_last``; the
measurements: docs/BENCHMARKS.md, "Channels-last convolutions").

A marked kernel is another workload than the same kernel unmarked (the mark is an attribute of the function, which
the structural hash sees): records stored before serve it as transfer donors, whose postprocessors run again on it.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from registry.tvm_side import sigmoid  # noqa: F401  (the vectorizable sigmoid: sigmoid.py)
from registry.tvm_side.batch_norms import batch_norms_into_convolutions
from registry.tvm_side.compat import TVM_ERRORS
from registry.tvm_side.gemm_schedules import vector_floats
from registry.tvm_side.imported_kernels import as_relax_operators
from registry.tvm_side.transposed_convolutions import transposed_convolutions_as_matmuls
from registry.tvm_side.transposes import (
    convolutions_nhwc,
    convolved_elements,
    elements_transposed_between_convolutions,
    rewrite_calls,
    run_time_calls,
    sink_transposes,
    static_shape,
    unit_transposes_as_reshapes,
)

LAYOUT_FREE = "layout_free_buffers"  # the function attribute RewriteLayout reads (AttachAttrLayoutFreeBuffers')


def model_passes(target: Target, exact_math: bool = False) -> tvm.transform.Pass:
    """The registry's rewriting of a model (a Relax module as ``from_onnx`` makes it) into the kernels it tunes and
    compiles: batch norms folded into their convolutions, fast math (CPU, unless ``exact_math``), channels-last
    convolutions (CPU, where the model converts cleanly), operators lowered and fused as ``compile_relax`` fuses them,
    convolutions' weights layout-free (CPU). Run within the target's context."""
    # First, on every target: a module from TVM's own from_onnx then has the kernels of the CLI's, whose ONNX
    # preparation folded its batch norms before import (batch_norms.py).
    passes = [_pass("BatchNormsIntoConvolutions", batch_norms_into_convolutions)]
    if _layout_free_here(target) and not exact_math:
        passes.append(_pass("FastMath", fast_math))
    if _layout_free_here(target):
        passes.append(_pass("TransposedConvolutionsAsMatmuls", transposed_convolutions_as_matmuls))
    passes += [_pass("ChannelsLast", lambda mod: _channels_last(mod, target)), *_fusion(target)]
    passes.append(_pass("LayoutFreeConvolutions", lambda mod: _layout_free_convolutions(mod, target)))
    return tvm.transform.Sequential(passes, name="registry.model_passes")


def task_module(mod: IRModule, target: Target, exact_math: bool = False) -> IRModule:
    """The module MetaSchedule's tasks are extracted from: ``mod`` after ``model_passes``. ``compile_model`` runs the
    same passes, so records found for these tasks apply there; ``tune_relax`` given this module tunes them too."""
    with target:
        return model_passes(target, exact_math)(mod)


def plain_module(mod: IRModule, target: Target) -> IRModule | None:
    """``mod`` fused as plain TVM fuses it for ``tune_relax`` and ``compile_relax``, without the registry's rewrites:
    the kernels a plain-TVM user of an export looks records up for. None where the rewrites change nothing (a GPU)."""
    if not _layout_free_here(target):
        return None
    with target:
        return tvm.transform.Sequential(_fusion(target))(mod)


def build_passes(target: Target, exact_math: bool = False) -> tvm.transform.Pass:
    """The whole build: ``with_records``'s passes, then the module lowered as ``compile_relax`` lowers it. What
    ``relax.get_pipeline("registry")`` returns."""
    return tvm.transform.Sequential([*_scheduling(target, exact_math), *lowering_passes(target)], name="registry")


def with_records(mod: IRModule, target: Target, exact_math: bool = False) -> IRModule:
    """``mod`` after ``model_passes``, each kernel replaced by the current database's best record (on a GPU,
    DLight's default schedule where there is none, as TVM does), weight reorderings folded into the weights: the
    build before lowering. Run within the target's and the database's contexts."""
    return tvm.transform.Sequential(_scheduling(target, exact_math))(mod)


def _scheduling(target: Target, exact_math: bool) -> list:
    from tvm.relax import pipeline
    from tvm.s_tir import dlight as dl

    passes = [model_passes(target, exact_math), relax.transform.MetaScheduleApplyDatabase()]
    if pipeline.BackendDispatcher.is_gpu_target(target):
        passes.append(
            dl.ApplyDefaultSchedule(
                dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
            )
        )
    if _layout_free_here(target):
        # A kernel whose record reorders its weight now starts with the reordering: split it off into a function of
        # its own ("..._weight_prepack"), called on the constant weight, which folding then runs once, here.
        passes += [relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant()]
    return passes


def compile_model(database, mod: IRModule, target: Target, exact_math: bool = False):
    """``mod`` (a Relax module as ``from_onnx`` makes it) compiled with ``database``'s records through
    ``build_passes``: returns the ``relax.Executable``."""
    with target, database, tvm.transform.PassContext(opt_level=3):
        return relax.build(mod, target=target, relax_pipeline=build_passes(target, exact_math))


@relax.register_pipeline("registry")
def _registered(target: Target | None = None, exact_math: bool = False) -> tvm.transform.Pass:
    """``relax.get_pipeline("registry", target=...)``: ``build_passes`` for plain ``relax.build`` (target: the
    current one where none is given)."""
    return build_passes(target or Target.current(), exact_math)


def _pass(name: str, rewrite) -> tvm.transform.Pass:
    """A module-level function as a named pass of the pipeline."""
    return tvm.transform.module_pass(lambda mod, _ctx: rewrite(mod), opt_level=0, name=name)


def fast_math(mod: IRModule) -> IRModule:
    """``mod`` with erf, exp, tanh and softmax as TVM's fast approximations (``topi.fast_erf``, ...), after powers by
    2, 3 or 4 became products (``integer_powers``). For a CPU.

    LLVM lowers ``erf`` to a call of libm's ``erff`` per element, which does not vectorize: 6.4 µs for 1,024 elements
    against 0.26 µs for ``fast_erf`` (AMD EPYC, AVX-512). In a GELU transformer that call outweighs the matmul it is
    fused into (docs/BENCHMARKS.md, "Fast math"). The approximations are within 4e-7 of the exact functions (measured
    over [-12, 12]), onnxruntime approximates the same functions, and the models' outputs differ from onnxruntime's no
    more than the exact build's do. On a GPU erf, exp and tanh are fast intrinsics already: ``model_passes`` leaves
    them.
    """
    return relax.transform.FastMathTransform()(integer_powers(mod))


_MAX_POWER = 4  # x**4 is 3 multiplications; beyond that, rounding grows and such exponents are rare in models


def integer_powers(mod: IRModule) -> IRModule:
    """``mod`` with ``power(x, c)`` for a scalar constant c of 2, 3 or 4 written as ``x * x (* x ...)``.

    LLVM keeps ``powf(x, 3.0)`` a call of libm per element, which does not vectorize (it expands only ``pow(x, 2)``
    without fast-math flags): a tanh GELU (``0.5x(1 + tanh(k(x + 0.044715x**3)))``) computed that way can be a
    quarter of a tuned transformer's time, where onnxruntime's FastGelu is one fused kernel (docs/BENCHMARKS.md,
    "Where the gap to onnxruntime is").
    The product differs from ``powf`` by a rounding or two (a few ulp).
    """
    from tvm.relax.dpl import is_const, is_op, wildcard

    base, exponent = wildcard(), is_const()
    pattern = is_op("relax.power")(base, exponent)

    def rewrite(call, matched):
        value = matched[exponent].value.numpy()
        if value.ndim != 0 or float(value) not in range(2, _MAX_POWER + 1):
            return call
        x = product = matched[base]
        for _ in range(int(value) - 1):
            product = relax.op.multiply(product, x)
        return product

    return rewrite_calls(mod, pattern, rewrite, "IntegerPowers")


def scheduled_arguments(arguments: tuple, scheduled: IRModule) -> tuple:
    """A scheduled kernel's arguments, given its workload's: the same, except in a kernel whose weights are
    layout-free. Its schedule reorders the weight into a layout of its own, and the kernel is built and timed reading
    that layout directly, as the compiled model runs it (the reordering folded into the constant), so the weight is
    passed in that layout's shape."""
    attrs = next(iter(scheduled.functions.values())).attrs
    if attrs is None or LAYOUT_FREE not in attrs:
        return arguments
    return tuple(a.as_json() for a in ArgInfo.from_entry_func(scheduled, remove_preproc=True)), arguments[1]


def _fusion(target: Target) -> list:
    """Operators lowered to TIR and fused into the kernels that become tasks, as ``compile_relax`` does it (not TVM's
    "zero" pipeline, which would also apply the current database, before the layouts are marked)."""
    from tvm.relax import pipeline

    try:
        dispatch = pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):  # a target TVM registers no dispatch for
        dispatch = []
    t = relax.transform
    return [*dispatch, t.LegalizeOps(), t.AnnotateTIROpPattern(), t.FoldConstant(), t.FuseOps(), t.FuseTIR()]


# The most a conversion may move through transposes between convolutions, as a share of the elements its
# convolutions write: between the shares of the models that gain from channels-last and of those that lose
# (docs/BENCHMARKS.md, "Evidence behind the code's rules").
MAX_TRANSPOSED_SHARE = 0.25


def _channels_last(mod: IRModule, target: Target) -> IRModule:
    """On a CPU, the model with its 2-d convolutions NHWC (weights OHWI), where that converts cleanly: the operators
    between the convolutions follow the layout, so that the transposes left, once the weights' are folded, sit at
    the model's edges (its inputs, a detector's heads before their reshapes) or move little between convolutions
    (``MAX_TRANSPOSED_SHARE``). Elsewhere, the model as it is.

    ``ConvertLayout`` wraps an operator it has no layout rule for in transposes to NCHW and back, and leaves some
    that need none between two transposes (a ConvNeXt's residual ``add``); ``sink_transposes`` then cancels those it
    can (ConvNeXt: 10 added, none after). Where transposes stay, around an operator Relax cannot see into, they
    cost more than the layout gains, as around the ``topi.maximum``/``minimum`` kernels the importer makes of an ONNX
    ``Clip`` with bound inputs (a hard-swish, a ReLU6). So those kernels and its ``Pad`` ones are first made the Relax
    operators they compute (``imported_kernels``), which follow the layout (docs/BENCHMARKS.md, "MobileNetV2
    channels-last"). Where the model stays NCHW it stays as the importer made it, so its kernels are those tuned before.

    A detector's heads are the other case: each reshapes its map to (channels, pixels) in NCHW order, so each keeps a
    transpose, though every operator before it converts. So transposes are counted between convolutions, as a share
    of what the convolutions write, not against the model's inputs and outputs, which would keep detectors NCHW.

    Where ``ConvertLayout`` itself fails (magika: "Invalid SLayout", on an operator after its convolution), each
    convolution is converted on its own between two transposes (``convolutions_nhwc``), which sinking and
    ``unit_transposes_as_reshapes`` then reduce, and the same rule decides.
    """
    if not _layout_free_here(target) or not _channels_fill_vectors(mod, target):
        return mod
    relaxed = as_relax_operators(mod)  # the importer's clip and pad kernels, which no layout rule sees into
    try:
        converted = sink_transposes(relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(relaxed))
    except TVM_ERRORS:
        converted = unit_transposes_as_reshapes(sink_transposes(convolutions_nhwc(relaxed)))
    added = elements_transposed_between_convolutions(converted) - elements_transposed_between_convolutions(mod)
    return converted if added <= MAX_TRANSPOSED_SHARE * convolved_elements(converted) else mod


def _channels_fill_vectors(mod: IRModule, target: Target) -> bool:
    """Whether ``mod``'s NCHW 2-d convolutions, weighted by their multiply-adds, fill the target's vectors better
    along their output channels (what channels-last vectorizes) than along their maps' rows (what NCHW does): 24
    channels fill 24 of 32 lanes of two AVX-512 vectors, a 3-pixel row 3 of 16.

    A model whose maps are wide and whose channels are few (a text classifier's 48x192 input, 8 to 24 channels)
    fills the vectors better by rows and runs faster NCHW; every model measured faster channels-last fills them
    better by its channels (docs/BENCHMARKS.md, "Channels-last convolutions", and "Evidence behind the code's
    rules")."""
    lanes = vector_floats(target)
    by_rows = by_channels = 0.0
    for binding in run_time_calls(mod, "relax.nn.conv2d"):
        call = binding.value
        if call.attrs.data_layout != "NCHW":
            continue
        out, weight = static_shape(binding.var), static_shape(call.args[1])
        if out is None or weight is None:
            continue
        macs = math.prod(out) * math.prod(weight[1:])
        by_rows += macs * _filled(out[3], lanes)
        by_channels += macs * _filled(out[1], lanes)
    return by_channels > by_rows or not by_rows  # no NCHW convolution: the conversion goes on as it did


def _filled(extent: int, lanes: int) -> float:
    """The share of vector lanes an axis of ``extent`` fills, vectorized ``lanes`` wide."""
    return extent / (math.ceil(extent / lanes) * lanes)


def _layout_free_convolutions(mod: IRModule, target: Target) -> IRModule:
    """On a CPU, every convolution kernel whose weight is a constant marked layout-free; other kernels unmarked."""
    if not _layout_free_here(target):
        return mod
    marked = relax.transform.AttachAttrLayoutFreeBuffers()(mod)
    for gv, func in list(marked.functions.items()):
        if isinstance(func, tvm.tirx.PrimFunc) and LAYOUT_FREE in (func.attrs or {}) and not _convolution(gv.name_hint):
            marked[gv] = func.without_attr(LAYOUT_FREE)
    return marked


def _convolution(kernel: str) -> bool:
    """A kernel whose weight is marked layout-free: a convolution, not a transposed one. A transposed convolution's
    reordered weight, split off and folded at compile time, made PaddleOCR det's output wrong in every element,
    though the kernel with its reordering inside computed its workload (``output_check``)."""
    return "conv" in kernel and "conv2d_transpose" not in kernel


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
