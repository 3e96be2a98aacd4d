"""Matrix-product seeds for 1x1 convolutions (``registry.tvm_side.gemm_schedules``): real TVM schedules, built and
run here against their workloads."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.tvm


def _task(kernel: int = 1, ci: int = 24, co: int = 32, size: int = 10):
    """The fused kernel of a channels-last convolution with its bias and SiLU, as the pipeline extracts it."""
    import numpy as np
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from registry.tvm_side.target import host_target

    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, size, size, ci), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(rng.standard_normal((co, kernel, kernel, ci)).astype("float32"))
            c = bb.emit(relax.op.nn.conv2d(x, w, padding=kernel // 2, data_layout="NHWC", kernel_layout="OHWI"))
            c = bb.emit(relax.op.add(c, relax.const(rng.standard_normal((1, 1, 1, co)).astype("float32"))))
            out = bb.emit_output(relax.op.multiply(c, relax.op.sigmoid(c)))
        bb.emit_func_output(out)
    target = host_target()
    mod = relax.get_pipeline("zero")(bb.get())
    [task] = [t for t in ms.relax_integration.extract_tasks(mod, target) if "conv2d" in t.task_name]
    return task.dispatched[0], target


def test_a_1x1_convolution_gets_matrix_product_schedules_that_compute_it():
    from registry.tvm_side.gemm_schedules import matrix_product_seeds, matrix_product_shape
    from registry.tvm_side.output_check import OutputCheck

    workload, target = _task(ci=128)
    assert matrix_product_shape(workload) == (100, 128, 32)
    seeds = matrix_product_seeds(workload, target)
    assert len(seeds) == 2  # the reduction whole, and split by 64
    check = OutputCheck(workload, target)
    for seed in seeds:
        assert check.problem(seed.mod) is None
        assert any(inst.kind.name == "CacheWrite" for inst in seed.trace.insts)  # the register tile


def test_other_kernels_and_targets_get_none():
    from tvm.target import Target

    from registry.tvm_side.gemm_schedules import matrix_product_seeds, matrix_product_shape

    three, target = _task(kernel=3)
    assert matrix_product_shape(three) is None and matrix_product_seeds(three, target) == []
    one, _ = _task()
    assert matrix_product_seeds(one, Target({"kind": "cuda", "arch": "sm_90"})) == []
