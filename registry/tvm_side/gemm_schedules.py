"""Matrix-product schedules for 1x1 convolutions on a CPU: seeds for their tuning.

A 1x1 convolution at stride 1 in channels-last (NHWC, OHWI weights: ``compile._channels_last``) is a matrix
product, (pixels x Ci) x (Ci x Co), with its epilogue (bias, SiLU) fused after it. MLAS computes it with a GEMM
micro-kernel: a tile of a few rows by two vectors of output channels held in registers while the reduction over Ci
streams through them. MetaSchedule's search rarely reaches that in a budget of minutes, and the schedule below,
written by hand, runs a detector's largest 1x1 convolutions about as fast as onnxruntime's
(``bench/gemm_schedule_bench.py``; the measurements: docs/BENCHMARKS.md, "1x1 convolutions as matrix products").

The schedule: the pixels fused into one axis and split by ``rows`` (4-7: with two vectors per row, 8-14 registers
of accumulators), the output channels by ``lanes`` (vectorized: two of the target's vectors, 16 floats with AVX2,
32 with AVX-512), the reduction over Ci by ``step``; the epilogue computed on each tile as it leaves the registers;
MetaSchedule's postprocessors as for any candidate (the weight rewritten into the tile's order,
``layout_free_buffers``). A convolution that stays NCHW (PaddleOCR det, MobileNetV2) swaps the roles where a vector
divides a row of its map: output channels by rows, pixels in vectors (a row of the input is contiguous there, and
each weight is broadcast). Its trace has only fixed splits, so it replays like any record. The tuning engine
measures these schedules first, as it does donors' (``task_search.TaskSearch``); the search then starts from
whichever is faster.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target, codegen

from registry.tvm_side.apply_trace import finished
from registry.tvm_side.compat import TVM_ERRORS

NHWC, NCHW = "conv2d_nhwc", "conv2d_nchw"  # TOPI's block names for a convolution in each layout
ROWS = (5, 4, 6, 7, 3, 2)  # the tile's rows, by preference: the first that divides what they run over
VECTORS = 2  # a tile's vectors per row: with 5 rows, 10 accumulators (four, measured slower on AVX2)
STEP = 64  # the reduction's other split: within 10-15% of the whole of Ci, either way round (see the module's doc)
HALF_AVX512 = 8  # the last resort for a tile's width: narrow networks' 8, 24 and 56 output channels


@dataclass(frozen=True)
class MatrixProduct:
    """A 1x1 convolution as a matrix product: ``pixels`` x ``ci`` times ``ci`` x ``co``, in ``layout``; ``width``: its
    maps' width. A tile's pixels stay within one row of the map: across rows, TVM's region analysis gives the register
    tile's write-back loops dynamic extents, which MetaSchedule's postprocessors refuse."""

    layout: str  # NHWC or NCHW, as the block is named
    pixels: int
    ci: int
    co: int
    width: int

    def pixel_vectors(self, lanes: int) -> bool:
        """Whether a tile's vectors (``lanes`` wide) run over pixels (NCHW, where a row of the input is contiguous and
        the weight is broadcast) rather than output channels (channels-last; and NCHW maps whose rows the vectors do
        not divide, where the weight's layout rewrite makes the channels contiguous and only the tile's stores
        stride)."""
        return self.layout == NCHW and self.width % lanes == 0

    def extents(self, lanes: int) -> tuple[int, int]:
        """What a tile's rows must divide (the output channels, or a row of the map), and what its vectors must."""
        return (self.co, self.width) if self.pixel_vectors(lanes) else (self.width, self.co)


def vector_floats(target: Target) -> int:
    """float32 lanes in one of the target's vectors: 8 with AVX2, 16 with AVX-512. With AVX-512, tiles of 32 floats
    (two vectors) run 1x1 convolutions faster than tiles of 16 (docs/BENCHMARKS.md, "1x1 convolutions as matrix
    products")."""
    try:  # (TVM's llvm_get_vector_width answers 512 for an AVX2 CPU too)
        return 16 if codegen.target_has_features("avx512f", target) else 8
    except TVM_ERRORS:
        return 8


def matrix_product_shape(mod: IRModule) -> MatrixProduct | None:
    """What ``mod`` multiplies where it is a float32 1x1 convolution at stride 1, batch 1, in NHWC (OHWI weights) or
    NCHW (OIHW), with or without a fused epilogue (which may pad its output for the next convolution); else None."""
    func = next(iter(mod.functions.values()))
    try:
        args = ArgInfo.from_prim_func(func)
    except TVM_ERRORS:
        return None
    if len(args) < 3 or any(a.dtype != "float32" for a in args):
        return None
    data, weight = ([int(d) for d in a.shape] for a in (args[0], args[1]))
    if len(data) != 4 or len(weight) != 4 or data[0] != 1:
        return None
    sch = Schedule(mod)
    out = _written(sch, NHWC)
    if out and weight[1:3] == [1, 1] and data[1:3] == out[1:3] and weight[3] == data[3] and weight[0] == out[3]:
        return MatrixProduct(NHWC, data[1] * data[2], data[3], out[3], data[2])
    out = _written(sch, NCHW)
    if out and weight[2:4] == [1, 1] and data[2:4] == out[2:4] and weight[1] == data[1] and weight[0] == out[1]:
        return MatrixProduct(NCHW, data[2] * data[3], data[1], out[1], data[3])
    return None


def _written(sch: Schedule, block: str) -> list[int] | None:
    """The shape of what ``block`` writes, where ``sch`` has such a block; else None."""
    try:
        written = sch.get(sch.get_sblock(block)).writes[0].source.shape
    except TVM_ERRORS:
        return None
    return [int(d) for d in written]


def matrix_product_schedule(
    mod: IRModule, target: Target, shape: MatrixProduct, rows: int, lanes: int, step: int
) -> Schedule | None:
    """``mod`` (its ``matrix_product_shape``: ``shape``) scheduled as a GEMM micro-kernel and postprocessed: a tile
    of ``rows`` by ``lanes`` (``MatrixProduct.pixel_vectors`` says of what), the reduction split by ``step``; None
    where it does not apply."""
    sch = Schedule(mod)
    try:
        root = sch.get_sblock("root")
        conv = sch.get_sblock(shape.layout)
        output = sch.get(sch.get_child_blocks(root)[-1]).name_hint
        pads = _written(sch, output) != _written(sch, shape.layout)  # an epilogue that pads for the next convolution
        for block in list(sch.get_child_blocks(root)):  # padding copies, bias, activation: into their consumers
            if sch.get(block).name_hint not in (shape.layout, output):
                sch.compute_inline(block)
        if shape.layout == NHWC:
            n, y, x, f, ry, rx, rc = sch.get_loops(conv)
        else:
            n, f, y, x, rc, ry, rx = sch.get_loops(conv)
        pixels = sch.fuse(y, x)
        by_rows, by_vectors = (f, pixels) if shape.pixel_vectors(lanes) else (pixels, f)
        row_tiles, in_row = sch.split(by_rows, [None, rows])
        vector_tiles, in_vector = sch.split(by_vectors, [None, lanes])
        steps, within = sch.split(rc, [None, step])
        sch.reorder(n, vector_tiles, row_tiles, steps, ry, rx, within, in_row, in_vector)  # n: the batch of 1
        accumulators = sch.cache_write(conv, 0, "local")
        sch.reverse_compute_at(accumulators, row_tiles)
        if not pads:  # the epilogue on each tile
            sch.reverse_compute_at(sch.get_sblock(output), row_tiles)
        # Vectorize the innermost axis only: a wider limit fuses the rows into the vector too, 10x slower.
        sch.annotate(root, "meta_schedule.vectorize", lanes)
        sch.annotate(root, "meta_schedule.unroll_explicit", 16)
    except TVM_ERRORS:
        return None
    return finished(sch, mod, target)


def matrix_product_seeds(mod: IRModule, target: Target) -> list[Schedule]:
    """Schedules of ``mod`` to measure before searching: for a 1x1 convolution on a CPU, one with the reduction
    split by ``STEP`` and one with it whole, in tiles of two of the target's vectors (or one, or 8 floats, where
    those do not divide); none for anything else."""
    shape = matrix_product_shape(mod) if target.kind.name == "llvm" else None
    if shape is None:
        return []
    vector = vector_floats(target)
    for lanes in dict.fromkeys((VECTORS * vector, vector, HALF_AVX512)):
        row_extent, vector_extent = shape.extents(lanes)
        rows = next((r for r in ROWS if row_extent % r == 0), None)
        if rows is not None and vector_extent % lanes == 0:
            break
    else:
        return []
    steps = [shape.ci] + ([STEP] if shape.ci % STEP == 0 and shape.ci > STEP else [])
    seeds = (matrix_product_schedule(mod, target, shape, rows, lanes, step) for step in steps)
    return [s for s in seeds if s is not None]
