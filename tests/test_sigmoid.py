"""TIR's sigmoid on a CPU as vectorizable arithmetic (``registry.tvm_side.sigmoid``): no libm call left in the
machine code, values as close to the true sigmoid as the libm build's, other dtypes as TVM lowers them. Real TVM,
real LLVM."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tvm

N = 4096


def _kernel(dtype: str, vectorized: bool):
    """y = sigmoid(x) over N elements, built for this machine (8 lanes at a time where vectorized)."""
    import tvm
    from tvm import te, tirx

    import registry.tvm_side.sigmoid  # noqa: F401  (what every registry door that builds imports)
    from registry.tvm_side.target import host_target

    x = te.placeholder((N,), dtype, name="x")
    y = te.compute((N,), lambda i: tirx.sigmoid(x[i]), name="y")
    schedule = tvm.s_tir.Schedule(te.create_prim_func([x, y]))
    if vectorized:
        (loop,) = schedule.get_loops(schedule.get_sblock("y"))
        schedule.vectorize(schedule.split(loop, [None, 8])[1])
    return tvm.compile(schedule.mod, target=host_target())


def _inputs(dtype: str) -> np.ndarray:
    """Both tails (where 1 + e^-x overflows, and where the sigmoid is 1) and the usual range."""
    rng = np.random.default_rng(0)
    return np.concatenate([np.linspace(-100, 100, N // 2), rng.standard_normal(N // 2) * 6]).astype(dtype)


def _sigmoid(kernel, x: np.ndarray) -> np.ndarray:
    import tvm

    y = tvm.runtime.tensor(np.zeros_like(x))
    kernel(tvm.runtime.tensor(x), y)
    return y.numpy()


@pytest.mark.parametrize("vectorized", [True, False])
def test_float32_sigmoid_has_no_libm_call_and_libm_accuracy(vectorized):
    kernel = _kernel("float32", vectorized)
    assert "expf" not in kernel.mod.inspect_source("asm")
    x = _inputs("float32")
    exact = 1 / (1 + np.exp(-x.astype("float64")))
    got = _sigmoid(kernel, x).astype("float64")
    assert np.all(np.isfinite(got)) and got.min() >= 0 and got.max() <= 1
    # float32's spacing next to 1 is 6e-8: the libm build is 8.9e-8 off, this one the same; relative: 1.2e-7, 2.7e-7
    assert np.abs(got - exact).max() < 2e-7
    normal = exact > 1e-30  # far in the lower tail both builds return 0 or a tiny denormal, as float32 must
    assert (np.abs(got - exact)[normal] / exact[normal]).max() < 4e-7


def test_float64_sigmoid_is_left_to_tvm():
    kernel = _kernel("float64", vectorized=False)
    assert "exp" in kernel.mod.inspect_source("asm")  # TVM's rule: a libm call
    x = _inputs("float64")
    assert np.abs(_sigmoid(kernel, x) - 1 / (1 + np.exp(-x))).max() < 1e-15
