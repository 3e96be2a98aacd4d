"""A fixed-length vector per workload, from its signature alone.

Two workloads are close when they are the same kind of operator over similar loop nests and tensors: the things that
decide whether one's schedule (tile sizes, vectorized axis, unrolling) fits the other. Extents and sizes enter as
log2, so 64 vs 128 is as far apart as 512 vs 1024.
"""

from __future__ import annotations

import math

import numpy as np

from registry.store.rows import Signature

OP_KINDS = (
    "conv2d", "depthwise_conv2d", "conv2d_transpose", "conv1d", "conv3d", "matmul", "batch_matmul", "dense",
    "softmax", "layer_norm", "group_norm", "pool", "reduce", "injective",
)  # fmt: skip
DTYPES = ("float32", "float16", "bfloat16", "int8")
MAX_SPATIAL, MAX_REDUCE, MAX_RANK = 6, 3, 4
# An operator of another kind must look farther than any of the same kind: log2 shape differences stay far below
# 100 over the other dimensions, so the one-hot block is weighted 100.
OP_WEIGHT = 100.0
DIM = len(OP_KINDS) + 1 + MAX_SPATIAL + MAX_REDUCE + 2 * MAX_RANK + 4 + len(DTYPES) + 1


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def embed(sig: Signature) -> np.ndarray:
    """The embedding of one signature: float32, length DIM."""
    v = np.zeros(DIM, dtype=np.float32)
    i = 0
    if sig.op_kind in OP_KINDS:
        v[OP_KINDS.index(sig.op_kind)] = OP_WEIGHT
    else:
        v[len(OP_KINDS)] = OP_WEIGHT  # an operator kind this version does not know
    i = len(OP_KINDS) + 1
    spatial = [e for k, e in zip(sig.iter_kinds, sig.extents, strict=False) if k == "S"]
    reduce = [e for k, e in zip(sig.iter_kinds, sig.extents, strict=False) if k != "S"]
    for values, width in ((spatial, MAX_SPATIAL), (reduce, MAX_REDUCE)):
        for j, e in enumerate(values[-width:]):  # the innermost loops matter most to a schedule
            v[i + j] = _log2(e)
        i += width
    inputs, output = sig.args[:-1], sig.args[-1:] if sig.args else ()
    for shapes in (inputs[:1], output):  # the first input's and the output's layout, innermost dims last
        for shape, _dtype in shapes:
            for j, d in enumerate(shape[-MAX_RANK:]):
                v[i + j] = _log2(d)
        i += MAX_RANK
    elems = [math.prod(s) if s else 1 for s, _ in sig.args]
    v[i] = _log2(sig.flops)
    v[i + 1] = _log2(sum(elems))
    v[i + 2] = _log2(sig.flops / max(1, sum(elems)))  # arithmetic intensity, per element moved
    v[i + 3] = float(len(sig.args))
    i += 4
    for _shape, dtype in sig.args[:1]:
        if dtype in DTYPES:
            v[i + DTYPES.index(dtype)] = 1.0
    i += len(DTYPES)
    v[i] = float(sum(1 for s, _ in sig.args if len(s) == 0))  # scalar arguments (e.g. an epsilon)
    return v
