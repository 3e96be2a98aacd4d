"""A candidate's outputs against its workload's (``registry.tvm_side.output_check``): real TVM builds, run here.

The workload is the shape of the MobileNetV2 kernel whose fastest tuned candidate left its padding unwritten: a
computation into 6x6, then padded to 7x7 for the next convolution."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.tvm


def _workload():
    from tvm import te, topi

    a = te.placeholder((1, 4, 6, 6), name="a")
    doubled = te.compute(a.shape, lambda n, c, h, w: a[n, c, h, w] * 2.0, name="doubled")
    padded = topi.nn.pad(doubled, [0, 0, 0, 0], [0, 0, 1, 1], name="padded")
    return te.create_prim_func([a, padded])


def _unwritten_border():
    """What the workload computes inside the border, and nothing on it."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def main(a: T.Buffer((1, 4, 6, 6), "float32"), padded: T.Buffer((1, 4, 7, 7), "float32")):
        for n, c, h, w in T.grid(1, 4, 6, 6):
            with T.sblock("padded"):
                vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
                padded[vn, vc, vh, vw] = a[vn, vc, vh, vw] * T.float32(2.0)

    return tvm.IRModule({"main": main})


def test_a_schedule_is_its_workload_and_one_that_skips_the_padding_is_not():
    import tvm
    from tvm.s_tir.schedule import Schedule

    from registry.tvm_side.output_check import OutputCheck
    from registry.tvm_side.target import host_target

    workload = tvm.IRModule({"main": _workload()})
    check = OutputCheck(workload, host_target())
    assert int(check.target.attrs["opt-level"]) == 0  # compiled without LLVM's passes: half the time, same values
    assert check.problem(workload) is None

    sch = Schedule(workload)
    sch.compute_inline(sch.get_sblock("doubled"))
    loops = sch.get_loops(sch.get_sblock("padded"))
    outer, inner = sch.split(loops[-1], factors=[None, 4])
    sch.reorder(inner, outer)
    assert check.problem(sch.mod) is None  # another loop nest, the same values

    wrong = check.problem(_unwritten_border())
    assert wrong is not None and "52 of 196 elements of argument 1" in wrong, wrong  # 4 channels x 13 on the border
