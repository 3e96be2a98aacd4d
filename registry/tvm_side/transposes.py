"""Transposes in a Relax model: counted, and moved past elementwise operators until pairs of them cancel.

``ConvertLayout`` (``compile._channels_last``) converts each operator it has a layout rule for and wraps the rest in
transposes: a ConvNeXt's residual ``add`` of two NCHW values stays NCHW between a transpose into it and one out of it,
and its own ``permute_dims`` to channels-last, already converted, become identities. 28 transposes at run time for 18
before; after ``sink_transposes``, 2: the model's input and output.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.ir import IRModule

# Operators that act on each element alone: a transpose of their input is the same transpose of their output.
_UNARY = (
    *("relax.clip", "relax.nn.relu", "relax.nn.leakyrelu", "relax.sigmoid", "relax.tanh", "relax.nn.silu"),
    *("relax.nn.gelu", "relax.nn.gelu_tanh", "relax.exp", "relax.negative", "relax.sqrt", "relax.erf"),
)
_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum")


def count_transposes(mod: IRModule) -> int:
    """Transposes of values computed at run time, from the model's inputs: those of constants fold away at compile
    time. Traced through the bindings, not by folding the model to count what is left: folding a large model takes
    seconds for a large model (docs/BENCHMARKS.md, "Evidence behind the code's rules"), and this runs at every
    extraction and compile."""
    return len(run_time_calls(mod, "relax.permute_dims"))


def elements_transposed_between_convolutions(mod: IRModule) -> int:
    """The elements that run-time transposes move, in one call of the model, where a 2-d convolution computes what
    they move and another reads what they give: a transpose at the model's edge (its input's, or one before the
    reshapes of a detector's heads) is paid once, one between convolutions wherever the layout breaks."""
    conv = tvm.ir.Op.get("relax.nn.conv2d")
    bindings = [b for block in mod["main"].body.blocks for b in block.bindings]
    after_conv: set = set()  # values computed from a convolution's output
    for b in bindings:
        if getattr(b.value, "op", None) == conv or any(v in after_conv for v in relax.analysis.free_vars(b.value)):
            after_conv.add(b.var)
    feeds_conv: set = set()  # values a convolution reads, directly or not
    for b in reversed(bindings):
        if getattr(b.value, "op", None) == conv or b.var in feeds_conv:
            feeds_conv.update(relax.analysis.free_vars(b.value))
    between = after_conv & feeds_conv
    return sum(_elements(b.var) for b in run_time_calls(mod, "relax.permute_dims") if b.var in between)


def convolved_elements(mod: IRModule) -> int:
    """The elements that run-time 2-d convolutions write in one call of the model."""
    return sum(_elements(b.var) for b in run_time_calls(mod, "relax.nn.conv2d"))


def run_time_calls(mod: IRModule, op_name: str) -> list:
    """The bindings of ``main`` that call ``op_name`` on values computed at run time (from the model's inputs)."""
    op = tvm.ir.Op.get(op_name)
    main = mod["main"]
    from_inputs = set(main.params)
    found = []
    for block in main.body.blocks:
        for binding in block.bindings:
            if not any(v in from_inputs for v in relax.analysis.free_vars(binding.value)):
                continue
            from_inputs.add(binding.var)
            if getattr(binding.value, "op", None) == op:
                found.append(binding)
    return found


def static_shape(value) -> list[int] | None:
    """A Relax value's shape, where every dimension of it is a constant; else None."""
    dims = getattr(getattr(value.ty, "shape", None), "values", None)
    if dims is None or not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
        return None
    return [int(d) for d in dims]


def _elements(var) -> int:
    """A tensor's element count (0 where its shape is not static, or it is a scalar)."""
    shape = static_shape(var)
    return math.prod(shape) if shape else 0


def sink_transposes(mod: IRModule) -> IRModule:
    """``mod`` with every transpose moved below the elementwise operators it feeds, two transposes in a row made one,
    and a transpose that leaves the axes in place dropped. An elementwise operator of two operands moves a transpose
    only where both are transposed alike, or the other is a scalar: so no transpose is added, except where a
    transposed value feeds something else too."""
    from tvm.relax.dpl import is_op, wildcard

    def permuted(arg):
        return is_op("relax.permute_dims")(arg)

    source = wildcard()
    inner = permuted(source)
    twice, lone = permuted(inner), permuted(wildcard())
    x, y, unary_x = wildcard(), wildcard(), wildcard()
    left, right, unary_in = permuted(x), permuted(y), permuted(unary_x)
    # Each alternative has wildcards of its own: sharing one between alternatives made the matcher miss the later
    # ones.
    pattern = twice | lone
    for name in _BINARY:
        pattern = pattern | is_op(name)(left, right) | is_op(name)(left, y) | is_op(name)(x, right)
    for name in _UNARY:
        pattern = pattern | is_op(name)(unary_in, varg_default_wildcard=True)
    padded_x = wildcard()
    padded_in = permuted(padded_x)
    pattern = pattern | is_op("relax.nn.pad")(padded_in)

    def rewrite(call, matched):
        name = call.op.name
        if name in _UNARY:
            return _below(call, [matched[unary_x], *call.args[1:]], _axes(matched[unary_in]))
        if name == "relax.nn.pad":
            return _padded_below(call, matched[padded_x], _axes(matched[padded_in]))
        if name in _BINARY:
            return _binary(call, matched.get(left), matched.get(right), matched.get(x), matched.get(y))
        axes = _axes(call)
        if matched.get(twice) is not None:  # permute(permute(v, a), b) is permute(v, a[b])
            first = _axes(matched[inner])
            return _transposed(matched[source], [first[i] for i in axes])
        # The same call back where nothing changes, not an equal new one: the rewriter repeats while a call changes.
        return call.args[0] if _identity(axes) else call

    return relax.transform.DeadCodeElimination()(rewrite_calls(mod, pattern, rewrite, "SinkTransposes"))


def convolutions_nhwc(mod: IRModule) -> IRModule:
    """``mod`` with each NCHW 2-d convolution made NHWC (its weight OHWI) between a transpose in and one out, as
    ``ConvertLayout`` does for an operator it converts, but with no layout rule for any other operator: for a model
    on which ``ConvertLayout`` fails (magika: "Invalid SLayout", on an operator after its convolution). The
    transposes left are then ``sink_transposes``'."""
    from tvm.relax.dpl import is_op, wildcard

    pattern = is_op("relax.nn.conv2d")(wildcard(), wildcard())

    def rewrite(call, _matched):
        a = call.attrs
        if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCHW", "OIHW", "NCHW"):
            return call
        data, weight = (relax.op.permute_dims(v, [0, 2, 3, 1]) for v in call.args)
        conv = relax.op.nn.conv2d(data, weight, a.strides, a.padding, a.dilation, a.groups, "NHWC", "OHWI", "NHWC",
                                  a.out_dtype)  # fmt: skip
        return relax.op.permute_dims(conv, [0, 3, 1, 2])

    return rewrite_calls(mod, pattern, rewrite, "ConvolutionsNHWC")


def unit_transposes_as_reshapes(mod: IRModule) -> IRModule:
    """``mod`` with every transpose that moves only axes of extent 1 made the reshape it is (its elements stay in
    order): magika's own transpose into NCHW and the one into NHWC before its convolution make one such."""
    from tvm.relax.dpl import is_op, wildcard

    pattern = is_op("relax.permute_dims")(wildcard())

    def rewrite(call, _matched):
        shape = static_shape(call.args[0])
        if shape is None:
            return call
        moved = [a for a in _axes(call) if shape[a] != 1]
        if moved != sorted(moved):
            return call
        return relax.op.reshape(call.args[0], [shape[a] for a in _axes(call)])

    return rewrite_calls(mod, pattern, rewrite, "UnitTransposesAsReshapes")


def rewrite_calls(mod: IRModule, pattern, rewrite, name: str) -> IRModule:
    """``mod`` with each call that ``pattern`` matches replaced by ``rewrite(call, matched)``, function by function."""
    from tvm.relax.dpl import rewrite_call

    @relax.transform.function_pass(opt_level=0, name=name)
    class RewriteCalls:
        def transform_function(self, func, _mod, _ctx):
            return rewrite_call(pattern, rewrite, func)

    return RewriteCalls()(mod)


def _binary(call, left, right, x, y):
    """``op(permute(x, p), permute(y, p))`` or ``op(permute(x, p), scalar)`` as ``permute(op(x, y), p)``."""
    a, b = call.args
    if left is not None and right is not None:
        return _below(call, [x, y], _axes(left)) if _axes(left) == _axes(right) else call
    if left is not None and _scalar(b):
        return _below(call, [x, b], _axes(left))
    if right is not None and _scalar(a):
        return _below(call, [a, y], _axes(right))
    return call


def _padded_below(call, x, axes: list[int]):
    """``pad(permute(x, axes))`` as ``permute(pad'(x), axes)``, pad' padding each axis of ``x`` as ``call`` pads the
    axis it becomes."""
    widths = [int(w) for w in call.attrs.pad_width]
    moved = [0] * len(widths)
    for i, axis in enumerate(axes):
        moved[2 * axis : 2 * axis + 2] = widths[2 * i : 2 * i + 2]
    attrs = call.attrs
    return relax.op.permute_dims(relax.op.nn.pad(x, moved, attrs.pad_mode, attrs.pad_value), axes)


def _below(call, operands: list, axes: list[int]):
    """``call``'s operator on ``operands``, then transposed by ``axes``: the transpose moved below it."""
    return relax.op.permute_dims(relax.Call(call.op, operands, call.attrs), axes)


def _transposed(value, axes: list[int]):
    return value if _identity(axes) else relax.op.permute_dims(value, axes)


def _identity(axes: list[int]) -> bool:
    return axes == sorted(axes)


def _axes(call) -> list[int]:
    if call.attrs.axes is not None:
        return [int(a) for a in call.attrs.axes]
    return list(range(call.args[0].ty.ndim))[::-1]  # no axes: reversed


def _scalar(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and expr.ty.ndim == 0
