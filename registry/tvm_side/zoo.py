"""Small ONNX models built in code (no downloads), for the demo, the tests and the benchmarks.

Weights are deterministic random numbers: they do not change kernel speed, shapes do.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype("float32"), name)


def mlp(batch: int = 16, sizes: tuple[int, ...] = (128, 256, 64), seed: int = 0) -> onnx.ModelProto:
    """Dense -> ReLU layers: one fused matmul task per layer."""
    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
        w, b = f"w{i}", f"b{i}"
        inits += [_init(rng, w, (n_in, n_out)), _init(rng, b, (n_out,))]
        nodes += [
            helper.make_node("MatMul", [cur, w], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", b], [f"add{i}"]),
        ]
        cur = f"add{i}"
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [cur], [f"relu{i}"]))
            cur = f"relu{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
        [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [batch, sizes[-1]])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
