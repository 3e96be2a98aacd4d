"""Matrix-product schedules for 1x1 convolutions on a CPU: seeds for their tuning.

A 1x1 convolution at stride 1 in channels-last (NHWC, OHWI weights: ``compile._channels_last``) is a matrix
product, (pixels x Ci) x (Ci x Co), with its epilogue (bias, SiLU) fused after it. MLAS computes it with a GEMM
micro-kernel: a tile of a few rows by two vectors of output channels held in registers while the reduction over Ci
streams through them. MetaSchedule's search rarely reaches that in a budget of minutes: YOLOv8n's 1x1
convolutions after 10 minutes of ``registry tune`` ran at 2.75x onnxruntime's, and plain MetaSchedule on its
10x10x384 -> 256 one reached 561 µs in 64 trials, where onnxruntime takes 275 µs. Written by hand as below, that
convolution runs in 249-304 µs, and YOLOv8n's eight largest 1x1 convolutions at 0.77-0.98x onnxruntime's
(``bench/gemm_schedule_bench.py``, docs/BENCHMARKS.md "1x1 convolutions as matrix products").

The schedule: the pixels fused into one axis and split by ``rows`` (4-7: with two vectors per row, 8-14 registers
of accumulators), the output channels by ``lanes`` (vectorized), the reduction over Ci by ``step``; the epilogue
computed on each tile as it leaves the registers; MetaSchedule's postprocessors as for any candidate (the weight
rewritten into the tile's order, ``layout_free_buffers``). Its trace has only fixed splits, so it replays like any
record. The tuning engine measures these schedules first, as it does donors' (``engine._TaskTuner``); the search
then starts from whichever is faster.
"""

from __future__ import annotations

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from registry.tvm_side.apply_trace import finished
from registry.tvm_side.compat import TVM_ERRORS

CONVOLUTION = "conv2d_nhwc"  # TOPI's block name for a channels-last convolution
ROWS = (5, 4, 6, 7, 3, 2)  # pixels per tile, by preference: the first that divides the pixels
LANES = 16  # output channels per tile: two AVX2 vectors of float32 (32, four, measured slower on AVX2)
STEP = 64  # the reduction's other split: within 10-15% of the whole of Ci, either way round, on YOLOv8n


def matrix_product_shape(mod: IRModule) -> tuple[int, int, int] | None:
    """(pixels, Ci, Co) where ``mod`` is a float32 1x1 convolution at stride 1 in NHWC, with or without a fused
    epilogue; else None."""
    func = next(iter(mod.functions.values()))
    try:
        args = ArgInfo.from_prim_func(func)
    except TVM_ERRORS:
        return None
    if len(args) < 3 or any(a.dtype != "float32" for a in args):
        return None
    data, weight, out = ([int(d) for d in a.shape] for a in (args[0], args[1], args[-1]))
    if len(data) != 4 or len(weight) != 4 or len(out) != 4 or data[0] != 1:
        return None
    if weight[1:3] != [1, 1] or data[1:3] != out[1:3] or weight[3] != data[3] or weight[0] != out[3]:
        return None
    return data[1] * data[2], data[3], out[3]


def matrix_product_schedule(mod: IRModule, target: Target, rows: int, lanes: int, step: int) -> Schedule | None:
    """``mod`` (see ``matrix_product_shape``) scheduled as a GEMM micro-kernel and postprocessed; None where it does
    not apply."""
    sch = Schedule(mod)
    try:
        root = sch.get_sblock("root")
        conv = sch.get_sblock(CONVOLUTION)
        output = sch.get(sch.get_child_blocks(root)[-1]).name_hint
        for block in list(sch.get_child_blocks(root)):  # padding copies, bias, activation: into their consumers
            if sch.get(block).name_hint not in (CONVOLUTION, output):
                sch.compute_inline(block)
        n, y, x, f, ry, rx, rc = sch.get_loops(conv)
        pixel_tiles, pixels = sch.split(sch.fuse(n, y, x), [None, rows])
        channel_tiles, channels = sch.split(f, [None, lanes])
        steps, within = sch.split(rc, [None, step])
        sch.reorder(channel_tiles, pixel_tiles, steps, ry, rx, within, pixels, channels)
        accumulators = sch.cache_write(conv, 0, "local")
        sch.reverse_compute_at(accumulators, pixel_tiles)
        sch.reverse_compute_at(sch.get_sblock(output), pixel_tiles)  # the epilogue on each tile
        # Vectorize the output channels only: a wider limit fuses the rows into the vector too, 10x slower.
        sch.annotate(root, "meta_schedule.vectorize", lanes)
        sch.annotate(root, "meta_schedule.unroll_explicit", 16)
    except TVM_ERRORS:
        return None
    return finished(sch, mod, target)


def matrix_product_seeds(mod: IRModule, target: Target) -> list[Schedule]:
    """Schedules of ``mod`` to measure before searching: for a 1x1 convolution on a CPU, one with the reduction
    split by ``STEP`` and one with it whole; none for anything else."""
    shape = matrix_product_shape(mod) if target.kind.name == "llvm" else None
    if shape is None:
        return []
    pixels, ci, co = shape
    rows = next((r for r in ROWS if pixels % r == 0), None)
    lanes = next((v for v in (LANES, LANES // 2) if co % v == 0), None)
    if rows is None or lanes is None:
        return []
    steps = [ci] + ([STEP] if ci % STEP == 0 and ci > STEP else [])
    seeds = (matrix_product_schedule(mod, target, rows, lanes, step) for step in steps)
    return [s for s in seeds if s is not None]
