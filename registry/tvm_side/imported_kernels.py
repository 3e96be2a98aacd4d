"""Kernels TVM's ONNX importer writes in TIR, made the Relax operators they are, so that layouts can move through them.

The importer lowers some ONNX operators straight to TIR (``emit_te``): a ``Clip`` with its bounds as inputs becomes a
``topi.maximum`` and a ``topi.minimum`` kernel (a ReLU6, a hard-swish), a ``Pad`` a ``topi.nn.pad`` one. Relax's
``ConvertLayout`` cannot see into a ``call_tir``, so it wraps each in transposes back to NCHW: MobileNetV2-0.35 kept
104 transposes and stayed NCHW (``compile._channels_last``). As ``relax.maximum``, ``relax.minimum`` and
``relax.nn.pad`` they follow the layout (``transposes.sink_transposes`` moves a transpose below a pad), and after
conversion two transposes are left, at the model's input and output.

A kernel is replaced only where the Relax operator, legalized, is the same PrimFunc as the importer's (structurally
equal): the same computation, whatever the importer's version does. A pad that pads nothing is dropped.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.sym.analyzer import Analyzer

from registry.tvm_side.transposes import rewrite_calls, static_shape


def as_relax_operators(mod: IRModule) -> IRModule:
    """``mod`` with each ``call_tir`` of a clip bound (maximum or minimum by a scalar) or a constant pad replaced by
    the Relax operator it computes; other calls as they are."""
    from tvm.relax.dpl import is_op, wildcard

    found: dict = {}  # kernel -> its Relax operator, or None: a kernel called several times is checked once

    def rewrite(call, _matched):
        kernel = call.args[0]
        if not isinstance(kernel, tvm.ir.GlobalVar) or not isinstance(mod[kernel], tvm.tirx.PrimFunc):
            return call
        args = list(call.args[1].fields)
        if kernel not in found:
            found[kernel] = _operator(mod[kernel], args, static_shape(call))
        operator = found[kernel]
        if operator is None:
            return call
        return args[0] if operator == "identity" else operator(*args)

    pattern = is_op("relax.call_tir")(wildcard(), wildcard())
    return rewrite_calls(mod, pattern, rewrite, "ImportedKernelsAsRelaxOperators")


def _operator(kernel: tvm.tirx.PrimFunc, args: list, result: list[int] | None):
    """The Relax operator whose legalization is ``kernel`` (called on ``args``, giving a tensor of shape
    ``result``), "identity" for a pad of nothing, or None."""
    types = [a.ty for a in args]
    if not all(isinstance(t, relax.TensorType) for t in types):
        return None
    if len(args) == 2 and types[1].ndim == 0:
        candidates = [relax.op.maximum, relax.op.minimum]
    elif len(args) == 1:
        candidates = _pads(kernel, static_shape(args[0]), result)
    else:
        return None
    for candidate in candidates:
        legal = _legalized(_unpadded if candidate == "identity" else candidate, types)
        if legal is not None and tvm_ffi.structural_equal(legal, kernel):
            return candidate
    return None


def _pads(kernel: tvm.tirx.PrimFunc, shape: list[int] | None, padded: list[int] | None) -> list:
    """The constant pad by zeros ``kernel`` may be (its widths read off the kernel's one read), as a candidate."""
    if shape is None or padded is None or len(shape) != len(padded):
        return []
    before = _offsets(kernel)
    if before is None or len(before) != len(shape):
        return []
    widths = []
    for size, out, first in zip(shape, padded, before, strict=True):
        widths += [first, out - size - first]
    if min(widths) < 0:
        return []
    if not any(widths):
        return ["identity"]

    def pad(x):
        return relax.op.nn.pad(x, widths, "constant", 0.0)

    return [pad]


def _unpadded(x):
    """A pad of nothing: TOPI's copy, which the check compares the kernel with."""
    return relax.op.nn.pad(x, [0] * (2 * x.ty.ndim), "constant", 0.0)


def _offsets(kernel: tvm.tirx.PrimFunc) -> list[int] | None:
    """Where the kernel's one block, at its first iteration, starts reading its one input: minus a pad's widths
    before each axis."""
    sch = Schedule(IRModule({"main": kernel}))
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    if len(blocks) != 1:
        return None
    block = sch.get(blocks[0])
    if len(block.reads) != 1:
        return None
    analyzer = Analyzer()
    for axis in block.iter_vars:
        analyzer.bind(axis.var, tvm.tirx.const(0, "int64"))
    starts = [analyzer.simplify(r.min) for r in block.reads[0].region]
    if not all(isinstance(s, tvm.tirx.IntImm) for s in starts):
        return None
    return [-int(s.value) for s in starts]


def _legalized(operator, types: list) -> tvm.tirx.PrimFunc | None:
    """The one PrimFunc ``LegalizeOps`` makes of ``operator`` called on arguments of these types."""
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", t) for i, t in enumerate(types)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(operator(*params))
        bb.emit_func_output(out)
    legal = relax.transform.LegalizeOps()(bb.get())
    kernels = [f for f in legal.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    return kernels[0] if len(kernels) == 1 else None
