"""Pinning input shapes and folding shape arithmetic in ONNX graphs: no TVM, checked against ONNX's reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from registry import onnx_prep
from registry.errors import BadInputError
from registry.tvm_side import zoo


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_the_shape_chain_becomes_a_constant_and_the_model_still_computes_the_same():
    model = zoo.exported_mlp()
    prepared = onnx_prep.prepare(model, {"x": [8, 64]})
    ops = [n.op_type for n in prepared.graph.node]
    assert ops == ["MatMul", "Add", "Relu", "Reshape"]  # Shape, Gather, Div and Concat are gone
    reshape = prepared.graph.node[-1]
    assert list(_initializers(prepared)[reshape.input[1]]) == [-1, 16, 2]
    x = np.random.default_rng(0).standard_normal((8, 64)).astype("float32")
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = ReferenceEvaluator(prepared).run(None, {"x": x})
    assert np.array_equal(want, got)


def test_shape_start_and_end_attributes_are_honoured():
    g = zoo._Graph(0)
    tail = g.op("Shape", ["x"], start=1)
    y = g.op("Reshape", ["x", g.op("Concat", [g.const([-1]), tail], axis=0)])
    model = g.model("m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 4])], y, ["n", 3, 4])
    prepared = onnx_prep.prepare(model, {"x": [2, 3, 4]})
    assert [n.op_type for n in prepared.graph.node] == ["Reshape"]
    assert list(_initializers(prepared)[prepared.graph.node[0].input[1]]) == [-1, 3, 4]


def test_folding_uses_the_models_opset():
    """Softmax before opset 13 flattens to 2-D at its axis; evaluated at the newest opset it would not."""
    logits = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    g = zoo._Graph(0)
    soft = g.op("Softmax", [g.const(logits, np.float32)], axis=1)
    y = g.op("Add", ["x", soft])
    graph = helper.make_graph(
        g.nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 2, 3])],
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    prepared = onnx_prep.prepare(model, {})
    assert [n.op_type for n in prepared.graph.node] == ["Add"]
    x = np.zeros((1, 2, 3), dtype=np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = ReferenceEvaluator(prepared).run(None, {"x": x})
    assert np.allclose(want, got)


def test_input_shapes_are_checked():
    model = zoo.exported_mlp()
    assert onnx_prep.fixed_input_shapes(model, {"x": [4, 64]}) == {"x": [4, 64]}
    with pytest.raises(BadInputError, match="symbolic dimensions .* --input-shape x=1,64"):
        onnx_prep.fixed_input_shapes(model, {})
    with pytest.raises(BadInputError, match="the model's inputs are x"):
        onnx_prep.fixed_input_shapes(model, {"y": [4, 64]})
    static = zoo.mlp(4, (8, 8))
    assert onnx_prep.fixed_input_shapes(static, {}) == {"x": [4, 8]}
    assert onnx_prep.input_dtypes(static) == {"x": "float32"}


def test_an_input_without_a_declared_rank_needs_a_shape():
    model = zoo.mlp(4, (8, 8))
    model.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(BadInputError, match="no declared shape"):
        onnx_prep.fixed_input_shapes(model, {})
    assert onnx_prep.fixed_input_shapes(model, {"x": [2, 8]}) == {"x": [2, 8]}


@pytest.mark.parametrize(
    ("spec", "ok"),
    [("x=1,3,224,224", {"x": [1, 3, 224, 224]}), ("a=b=2", {"a=b": [2]}), ("x=", None), ("x=0,1", None), ("=1", None)],
)
def test_parse_input_shapes(spec, ok):
    if ok is None:
        with pytest.raises(BadInputError):
            onnx_prep.parse_input_shapes([spec])
    else:
        assert onnx_prep.parse_input_shapes([spec]) == ok
