"""Matrix-product seeds for 1x1 convolutions (``registry.tvm_side.gemm_schedules``): real TVM schedules, built and
run here against their workloads."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.tvm


def _task(kernel: int = 1, ci: int = 24, co: int = 32, size: int = 10, layout: str = "NHWC", pad: bool = False):
    """The fused kernel of a convolution with its bias and SiLU, as the pipeline extracts it: channels-last (OHWI
    weights), or NCHW (OIHW); ``pad``: its output padded by one pixel after each row and column, for a next
    convolution at stride 2 (MobileNetV2's exports pad so)."""
    import numpy as np
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from registry.tvm_side.target import host_target

    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    nhwc = layout == "NHWC"
    x = relax.Var("x", relax.TensorType((1, size, size, ci) if nhwc else (1, ci, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(rng.standard_normal((co, kernel, kernel, ci) if nhwc else (co, ci, kernel, kernel))
                            .astype("float32"))  # fmt: skip
            c = bb.emit(relax.op.nn.conv2d(x, w, padding=kernel // 2, data_layout=layout,
                                           kernel_layout="OHWI" if nhwc else "OIHW"))  # fmt: skip
            bias = rng.standard_normal((1, 1, 1, co) if nhwc else (1, co, 1, 1)).astype("float32")
            c = bb.emit(relax.op.add(c, relax.const(bias)))
            c = bb.emit(relax.op.multiply(c, relax.op.sigmoid(c)))
            if pad:
                c = bb.emit(relax.op.nn.pad(c, [0, 0, 0, 1, 0, 1, 0, 0] if nhwc else [0, 0, 0, 0, 0, 1, 0, 1]))
            out = bb.emit_output(c)
        bb.emit_func_output(out)
    target = host_target()
    mod = relax.get_pipeline("zero")(bb.get())
    [task] = [t for t in ms.relax_integration.extract_tasks(mod, target) if "conv2d" in t.task_name]
    return task.dispatched[0], target


@pytest.mark.parametrize("layout, size, pixel_vectors", [("NHWC", 8, False), ("NCHW", 8, False), ("NCHW", 16, True)])
def test_a_1x1_convolution_gets_matrix_product_schedules_that_compute_it(layout, size, pixel_vectors):
    """Channels-last: pixels by rows, output channels in vectors. NCHW (PaddleOCR det, MobileNetV2: their activations
    keep them from converting): output channels by rows and pixels in vectors where a vector divides a row of the
    map, else as channels-last."""
    from registry.tvm_side.gemm_schedules import MatrixProduct, matrix_product_seeds, matrix_product_shape
    from registry.tvm_side.output_check import OutputCheck

    workload, target = _task(ci=128, size=size, layout=layout)
    shape = matrix_product_shape(workload)
    assert shape == MatrixProduct(layout.lower().join(["conv2d_", ""]), size * size, 128, 32, size)
    assert shape.pixel_vectors(16) == pixel_vectors
    seeds = matrix_product_seeds(workload, target)
    assert len(seeds) == 2  # the reduction whole, and split by 64
    check = OutputCheck(workload, target)
    for seed in seeds:
        assert check.problem(seed.mod) is None
        assert any(inst.kind.name == "CacheWrite" for inst in seed.trace.insts)  # the register tile


def test_other_kernels_and_targets_get_none():
    from tvm.target import Target

    from registry.tvm_side.gemm_schedules import matrix_product_seeds, matrix_product_shape

    for layout in ("NHWC", "NCHW"):
        three, target = _task(kernel=3, layout=layout)
        assert matrix_product_shape(three) is None and matrix_product_seeds(three, target) == []
    one, _ = _task()
    assert matrix_product_seeds(one, Target({"kind": "cuda", "arch": "sm_90"})) == []


def test_tiles_are_two_of_the_targets_vectors_wide():
    """Two AVX2 vectors hold 16 floats, two AVX-512 ones 32: on a Zen 5, 16-wide tiles ran YOLOv8n's three largest
    1x1 convolutions at 1.36-1.66x onnxruntime's, 32-wide ones at 0.94-1.20x."""
    from tvm.target import Target

    from registry.tvm_side.gemm_schedules import vector_floats

    assert vector_floats(Target({"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-linux-gnu"})) == 8
    assert vector_floats(Target({"kind": "llvm", "mcpu": "skylake-avx512", "mtriple": "x86_64-linux-gnu"})) == 16


@pytest.mark.parametrize("co, pad", [(32, True), (8, False)])
def test_a_padded_epilogue_or_a_narrow_output_still_gets_matrix_product_schedules(co, pad):
    """MobileNetV2-0.35 in channels-last: a 1x1 expansion whose epilogue pads its output for the strided depthwise
    convolution after it (the output is not the product's shape: the pad stays after the tiles), and projections to 8
    output channels (narrower than two AVX-512 vectors, or one: tiles 8 floats wide)."""
    from registry.tvm_side.gemm_schedules import MatrixProduct, matrix_product_seeds, matrix_product_shape
    from registry.tvm_side.output_check import OutputCheck

    workload, target = _task(ci=16, co=co, size=8, pad=pad)
    assert matrix_product_shape(workload) == MatrixProduct("conv2d_nhwc", 64, 16, co, 8)
    seeds = matrix_product_seeds(workload, target)
    assert seeds
    check = OutputCheck(workload, target)
    for seed in seeds:
        assert check.problem(seed.mod) is None
