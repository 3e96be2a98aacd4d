"""Transposed convolutions whose stride equals their kernel, written as the matrix product they are.

A decoder's upsampling ``ConvTranspose`` (kernel 2x2, stride 2, as PaddleOCR det's last two layers) gives each input
pixel its own kh x kw block of output pixels: ``y[n, co, i*kh + a, j*kw + b] = sum_ci x[n, ci, i, j] w[ci, co, a, b]``.
That is one matrix product, ``(pixels, Ci) x (Ci, Co*kh*kw)``, then a rearrangement of its result. TOPI lowers every
``conv2d_transpose`` as a convolution over the input dilated with zeros instead: at stride 2, three of its four
multiplications are by a zero, and MetaSchedule tunes that loop nest as any other. PaddleOCR det's two such layers
took 37.5 ms of a 53 ms model, where onnxruntime's took 0.39 ms (docs/BENCHMARKS.md, "Convolutional networks on
CPUs"). As a product, each is a matmul task, which tunes as the transformers' do, and an injective rearrangement
that fuses with the bias and activation after it.
"""

from __future__ import annotations

from tvm import relax
from tvm.ir import IRModule

from registry.tvm_side.transposes import rewrite_calls, static_shape


def transposed_convolutions_as_matmuls(mod: IRModule) -> IRModule:
    """``mod`` with each 2-d transposed convolution whose stride equals its kernel (no padding, dilation or groups,
    NCHW, static shapes) written as ``matmul`` and reshapes; the others as they are. The same sums in another order:
    the outputs agree to a rounding."""
    from tvm.relax.dpl import is_op, wildcard

    pattern = is_op("relax.nn.conv2d_transpose")(wildcard(), wildcard())

    def rewrite(call, _matched):
        data, weight = call.args
        shapes = static_shape(data), static_shape(weight)
        if None in shapes or not _as_product(call.attrs, shapes[1]):
            return call
        (n, ci, h, w), (_, co, kh, kw) = shapes
        rows = relax.op.permute_dims(data, [0, 2, 3, 1])  # one row of Ci per input pixel
        product = relax.op.matmul(rows, relax.op.reshape(weight, [ci, co * kh * kw]), out_dtype=call.ty.dtype.dtype)
        blocks = relax.op.permute_dims(relax.op.reshape(product, [n, h, w, co, kh, kw]), [0, 3, 1, 4, 2, 5])
        return relax.op.reshape(blocks, [n, co, h * kh, w * kw])

    return rewrite_calls(mod, pattern, rewrite, "TransposedConvolutionsAsMatmuls")


def _as_product(attrs, weight_shape: list[int]) -> bool:
    """Whether the call's output blocks never overlap nor leave gaps: each input pixel writes its own block."""
    ints = lambda values: [int(v) for v in values]  # noqa: E731
    return (
        (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == ("NCHW", "IOHW", "NCHW")
        and int(attrs.groups) == 1
        and ints(attrs.strides) == weight_shape[2:]
        and not any(ints(attrs.padding))
        and not any(ints(attrs.output_padding))
        and ints(attrs.dilation) == [1, 1]
    )
