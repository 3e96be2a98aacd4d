"""TIR's ``sigmoid`` on LLVM targets as arithmetic that vectorizes, instead of a libm call per element.

TVM lowers ``sigmoid(x)`` to ``1 / (1 + exp(-x))`` with LLVM's ``exp`` intrinsic, which LLVM turns into a call of
libm's ``expf`` per element: a vectorized epilogue is split back into scalar calls. A SiLU CNN pays that in every
convolution (YOLOv8n at 320x320 has 3.4 million sigmoid elements). Here ``exp(-x)`` is written out as Cephes'
``expf`` does it: ``-x = n ln2 + r`` with ``|r| <= ln2 / 2``, a degree-6 polynomial for ``e^r``, and ``2^n`` put
into the float's exponent bits. Measured over [-100, 100] and N(0, 6) against float64 (``tests/test_sigmoid.py``):
the largest absolute error as the libm build's (8.9e-8; float32's spacing next to 1 is 6e-8), relative 2.7e-7
against libm's 1.2e-7 (where the sigmoid is above 1e-30); a SiLU over 102,400 floats took 336 µs with libm and 49
µs so (AMD EPYC, AVX2, one thread).

The rule replaces TVM's for ``tirx.sigmoid`` on ``llvm`` targets in this process, at TVM's lowering of intrinsics,
after scheduling: MetaSchedule still sees one ``sigmoid`` call, so workloads, their records and the search are as
before; only the machine code changes, and LLVM takes longer to compile it (about 1.3x over a CNN's tuned convolutions:
docs/BENCHMARKS.md, "Sigmoids"). It is registered when a module that builds imports this one (``build.py``, the
measurement workers' build; ``compile.py``, the model's; ``output_check.py``), so a candidate is timed with the code the
model is compiled with. Not a fast-math approximation (no less accurate than float32 allows), so ``--exact-math`` keeps
it.
"""

from __future__ import annotations

from tvm import tirx
from tvm.runtime import DataType, DataTypeCode
from tvm.tirx.op import register_intrin_lowering

_LOG2E = 1.4426950408889634
# ln 2 in one float32 constant, 1.9e-9 off: r is off by at most 127 times that where |x| nears 88, where the sigmoid
# is 1 or under 1e-38. Cephes' ln 2 in two parts is exact there, but its one more instruction makes LLVM take 1.4x as
# long over a CNN's tuned convolutions (docs/BENCHMARKS.md, "Sigmoids"), and every candidate tuning measures is
# compiled.
_LN2 = 0.6931471805599453
# e^r = 1 + r + r^2 Q(r) on [-ln2/2, ln2/2], Q of degree 4 fitted here (Lawson's minimax iteration on 4,000
# Chebyshev nodes): 3e-9 relative, far under float32's 6e-8. Cephes' degree 5 is no more accurate in float32, and
# each term is one more instruction in every unrolled epilogue that LLVM compiles.
_Q = (1.3814610043e-3, 8.3687101274e-3, 4.1668387429e-2, 1.6666520687e-1, 4.9999993451e-1)
# exp(-x) is computed for -x in [-87, 88]: 2^n then stays a normal float (n in [-126, 127]); beyond, the sigmoid
# is 1 or below 1e-38 and the clamp changes it by less than float32 can show next to 1 (or by under 1e-38).
_LOWEST, _HIGHEST = -87.0, 88.0
_LEVEL = 99  # above TVM's own rule (level 10)


def lower_sigmoid(call):
    """``call`` (``tirx.sigmoid`` of a float32 scalar or fixed-width vector) as vectorizable arithmetic; any other
    dtype (float16, float64, scalable vectors) as TVM lowers it."""
    (x,) = call.args
    dtype = DataType(str(x.ty.dtype))
    if dtype.type_code != DataTypeCode.FLOAT or dtype.bits != 32 or dtype.lanes < 1:
        return call
    floats, ints = str(dtype), f"int32x{dtype.lanes}" if dtype.lanes > 1 else "int32"

    def const(value, of=floats):
        return tirx.const(value, of)

    t, n, r = (tirx.Var(name, floats) for name in ("t", "n", "r"))  # let-bound: each is used several times
    exp_r = const(_Q[0])
    for coefficient in (*_Q[1:], 1.0, 1.0):  # Horner's rule through 1 + r + r^2 Q(r)
        exp_r = exp_r * r + const(coefficient)
    exponent = tirx.shift_left(tirx.Cast(ints, n) + const(127, ints), const(23, ints))
    exp_t = exp_r * tirx.reinterpret(floats, exponent)
    sigmoid = const(1.0) / (const(1.0) + exp_t)
    return tirx.Let(
        t,
        tirx.max(tirx.min(-x, const(_HIGHEST)), const(_LOWEST)),
        tirx.Let(
            n,
            tirx.floor(t * const(_LOG2E) + const(0.5)),
            tirx.Let(r, t - n * const(_LN2), sigmoid),
        ),
    )


register_intrin_lowering("tirx.sigmoid", "llvm", f=lower_sigmoid, level=_LEVEL)
