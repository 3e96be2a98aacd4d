"""Batch norms after convolutions, folded into the convolutions' weights and bias, in a Relax module.

An inference batch norm is a per-channel scale and shift, so a convolution followed by one is the same convolution
with its weights scaled and its bias shifted. The CLI folds them in the ONNX graph before TVM imports it
(``onnx_prep``); a module a user imports with TVM's own ``from_onnx`` reaches ``registry.compile_model`` with them
still there. Its kernels are then not those the registry tuned (a bare ``conv2d``, then a batch norm fused with
what follows, instead of ``conv2d_add``), and keep TVM's default schedules: PaddleOCR det through the Python API ran
1.12x the CLI's library for 3 such tasks of its 65. Folded here, in the form ``from_onnx`` gives a ``Conv`` with a
bias, the API's kernels are the CLI's. TVM's own ``FoldBatchnormToConv2D`` misses a convolution with a bias (from_onnx
writes it as ``add(conv2d, bias)`` before the norm) and leaves its arithmetic as Relax calls for ``FoldConstant``;
this folds both forms, computing the weights once in numpy.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant

from registry.tvm_side.transposes import static_shape


def batch_norms_into_convolutions(mod: IRModule) -> IRModule:
    """``mod`` with each inference batch norm over a 2-d convolution's output (NCHW, constant float32 weights and
    statistics, the convolution read by nothing else) folded into that convolution; the others as they are. The
    same sums in another order: the outputs agree to a rounding."""
    from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, rewrite_call, wildcard

    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    bias = is_const() | is_op("relax.reshape")(is_const(), wildcard())
    biased = is_op("relax.add")(conv, bias)
    norm = is_op("relax.nn.batch_norm")(conv | biased, is_const(), is_const(), is_const(), is_const())
    pattern = TupleGetItemPattern(norm, 0)

    @relax.transform.function_pass(opt_level=0, name="BatchNormsIntoConvolutions")
    class Fold:
        def transform_function(self, func, _mod, _ctx):
            once = _read_once(func)

            def rewrite(call, matched):
                folded = _folded(matched[norm], matched[conv], matched.get(biased), matched.get(bias))
                alone = all(once(e) for e in (matched[conv], matched.get(biased)) if e is not None)
                return folded if folded is not None and alone else call

            return rewrite_call(pattern, rewrite, func)

    return Fold()(mod)


def _folded(norm, conv, biased, bias_given):
    """``conv`` (plus ``biased``, adding ``bias_given``) then ``norm``, as one convolution and a bias; None where it
    does not fold."""
    x, weight = conv.args
    gamma, beta, mean, var = (a.value.numpy() for a in norm.args[1:])
    attrs = conv.attrs
    if (
        (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW")
        or int(norm.attrs.axis) != 1
        or bool(norm.attrs.training)
        or not (bool(norm.attrs.center) and bool(norm.attrs.scale))  # gamma and beta both applied, as from_onnx has it
        or conv.ty.dtype != "float32"
    ):
        return None
    w = weight.value.numpy()
    channels = w.shape[0]
    if w.dtype != np.float32 or any(v.shape != (channels,) or v.dtype != np.float32 for v in (gamma, beta, mean, var)):
        return None
    bias = np.zeros(channels, "float32")
    if biased is not None:
        values = (bias_given if isinstance(bias_given, Constant) else bias_given.args[0]).value.numpy()
        # a per-channel bias, not one that broadcasts the output to another shape
        if values.size != channels or static_shape(biased) is None or static_shape(biased) != static_shape(conv):
            return None
        bias = values.reshape(channels)
    scale = gamma / np.sqrt(var + float(norm.attrs.epsilon))
    folded_w = (w * scale.reshape(channels, 1, 1, 1)).astype("float32")
    folded_b = ((bias - mean) * scale + beta).astype("float32")
    call = relax.Call(conv.op, [x, relax.const(folded_w)], conv.attrs)
    # as from_onnx writes a Conv's bias, so that the kernels are those of the CLI's folded model
    return relax.op.add(call, relax.op.reshape(relax.const(folded_b), [1, -1, 1, 1]))


def _read_once(func):
    """A test of whether a value bound in ``func`` is read by exactly one expression (and is not its result)."""
    bound = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            bound[binding.value] = binding.var
    reads: dict = {}

    def count(expr):
        if isinstance(expr, relax.Var):
            reads[expr] = reads.get(expr, 0) + 1

    relax.analysis.post_order_visit(func.body, count)
    return lambda value: value in bound and reads.get(bound[value], 0) == 1
