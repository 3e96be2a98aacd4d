"""Pinning input shapes and folding shape arithmetic in ONNX graphs: no TVM, checked against ONNX's reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from registry.errors import BadInputError
from registry.tvm_side import onnx_prep, zoo


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


def _model(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _window_partition_model() -> onnx.ModelProto:
    """Swin's window attention as HF exports it: pad height and width up to a multiple of the window with pads
    computed at run time ((4 - w % 4) % 4 -> Concat -> Pad), then cut windows with a Reshape whose target is built
    from the padded value's Shape. The Pad's output shape is only known once its pads are folded, so the Shape after
    it can only fold in a second round."""
    g = zoo._Graph(0)
    four = g.const(4)
    dims = g.op("Shape", ["x"])
    pad = {}
    for axis in (1, 2):
        size = g.op("Gather", [dims, g.const(axis)], axis=0)
        missing = g.op("Mod", [g.op("Sub", [four, g.op("Mod", [size, four])]), four])
        pad[axis] = g.op("Unsqueeze", [missing, g.const([0])])
    zero = g.const([0])
    pads = g.op("Concat", [zero, zero, zero, zero, zero, pad[1], pad[2], zero], axis=0)
    padded = g.op("Pad", ["x", pads])
    shape = g.op("Shape", [padded])
    part = [g.op("Unsqueeze", [g.op("Gather", [shape, g.const(i)], axis=0), g.const([0])]) for i in range(4)]
    rows = g.op("Div", [part[1], g.const([4])])
    cols = g.op("Div", [part[2], g.const([4])])
    target = g.op("Concat", [part[0], rows, g.const([4]), cols, g.const([4]), part[3]], axis=0)
    windows = g.op("Reshape", [padded, target])
    y = g.op("Transpose", [windows], perm=[0, 1, 3, 2, 4, 5])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "h", "w", 3])
    return _model(g.nodes, [x], [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], g.inits)


def test_folding_repeats_until_the_shapes_settle(monkeypatch):
    model = _window_partition_model()
    shapes = {"x": [1, 6, 7, 3]}
    monkeypatch.setattr(onnx_prep, "MAX_FOLD_ROUNDS", 1)
    assert "Shape" in [n.op_type for n in onnx_prep.prepare(model, shapes).graph.node]  # one round is not enough
    monkeypatch.undo()
    prepared = onnx_prep.prepare(model, shapes)
    assert [n.op_type for n in prepared.graph.node] == ["Pad", "Reshape", "Transpose"]
    assert len(prepared.graph.initializer) == 2  # the folded pads and window shape; the constants they used are gone
    x = np.random.default_rng(0).standard_normal((1, 6, 7, 3)).astype("float32")
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = ReferenceEvaluator(prepared).run(None, {"x": x})
    assert want.shape == (1, 2, 2, 4, 4, 3)
    assert np.array_equal(want, got)


@pytest.mark.parametrize(("shape", "axis"), [((3, 5), 0), ((3, 5), 1), ((2, 3, 4), -1), ((4, 60), 1)])
def test_gather_elements_matches_the_reference(shape, axis):
    """Where the reference evaluator's GatherElements works (fewer than 64 entries on the axis), folding agrees."""
    rng = np.random.default_rng(1)
    data = rng.standard_normal(shape).astype("float32")
    indices = rng.integers(-shape[axis], shape[axis], size=shape).astype("int64")
    node = helper.make_node("GatherElements", ["d", "i"], ["y"], axis=axis)
    model = _model(
        [node], [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(data, "d"), numpy_helper.from_array(indices, "i")],
    )  # fmt: skip
    (want,) = ReferenceEvaluator(model).run(None, {})
    assert np.array_equal(onnx_prep._gather_elements(node, data, indices), want)


def _token_type_model(gather_elements: bool) -> onnx.ModelProto:
    """HF BERT's embeddings: the buffered token type ids (1 x max_positions zeros) expanded to the batch and gathered
    at the position ids, then looked up in the token type table. ``gather_elements=False`` builds the same model with
    the one-row GatherElements written as Gather, which the reference evaluator computes right: the oracle."""
    g = zoo._Graph(0)
    dims = g.op("Shape", ["input_ids"])
    batch = g.op("Unsqueeze", [g.op("Gather", [dims, g.const(0)], axis=0), g.const([0])])
    seq = g.op("Unsqueeze", [g.op("Gather", [dims, g.const(1)], axis=0), g.const([0])])
    positions = g.op("Slice", [g.const(np.arange(128)[None]), g.const([0]), seq, g.const([1])])
    buffered = g.op("Expand", [g.const(np.zeros((1, 128))), g.op("Concat", [batch, g.const([128])], axis=0)])
    if gather_elements:
        types = g.op("GatherElements", [buffered, positions], axis=1)
    else:
        types = g.op("Gather", [buffered, g.op("Squeeze", [positions, g.const([0])])], axis=1)
    words = g.op("Gather", [g.weight((100, 8)), "input_ids"])
    y = g.op("Add", [words, g.op("Gather", [g.weight((2, 8)), types])])
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    return _model(g.nodes, [ids], [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], g.inits)


def test_bert_buffered_token_types_fold_past_the_references_64_entry_limit():
    model = _token_type_model(gather_elements=True)
    prepared = onnx_prep.prepare(model, {"input_ids": [1, 32]})
    assert [n.op_type for n in prepared.graph.node] == ["Gather", "Add"]  # the token type rows became a constant
    ids = np.random.default_rng(2).integers(0, 100, size=(1, 32))
    (want,) = ReferenceEvaluator(_token_type_model(gather_elements=False)).run(None, {"input_ids": ids})
    (got,) = ReferenceEvaluator(prepared).run(None, {"input_ids": ids})
    assert np.array_equal(want, got)


def test_paddle_slice_of_shape_at_opset_12_folds():
    """Paddle2ONNX's flatten before attention (PP-OCRv4 rec): Concat(Slice(Shape(x), 0, 2), [-1]) -> Reshape, its
    constants as Constant nodes rather than initializers, at opset 12."""

    def const(name: str, values) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(values, np.int64)))

    nodes = [
        const("starts", [0]), const("ends", [2]), const("axes", [0]), const("minus_one", [-1]),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Slice", ["s", "starts", "ends", "axes"], ["head"]),
        helper.make_node("Concat", ["head", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["p2o.DynamicDimension.0", 120, "?", "?"])
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [], opset=12)
    prepared = onnx_prep.prepare(model, {"x": [1, 120, 1, 20]})
    assert [n.op_type for n in prepared.graph.node] == ["Relu", "Reshape"]
    assert list(_initializers(prepared)[prepared.graph.node[1].input[1]]) == [1, 120, -1]
    value = np.random.default_rng(3).standard_normal((1, 120, 1, 20)).astype("float32")
    (want,) = ReferenceEvaluator(model).run(None, {"x": value})
    (got,) = ReferenceEvaluator(prepared).run(None, {"x": value})
    assert want.shape == (1, 120, 20) and np.array_equal(want, got)


def _same_outputs(model: onnx.ModelProto, prepared: onnx.ModelProto) -> None:
    x = np.random.default_rng(5).standard_normal((1, 4, 8, 9)).astype("float32")
    wanted, got = (ReferenceEvaluator(m).run(None, {"x": x}) for m in (model, prepared))
    assert len(wanted) == len(got)
    for want, have in zip(wanted, got, strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


def _conv_batch_norm(bias: bool, group: int = 1, conv_read_twice: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(6)
    c = 4

    def const(name, *shape, low=-1.0):
        return numpy_helper.from_array(rng.uniform(low, 1.0, shape).astype("float32"), name)

    inits = [const("w", c, c // group, 3, 3), const("scale", c), const("shift", c), const("mean", c),
             const("var", c, low=0.1)]  # fmt: skip
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(const("b", c))
        conv_inputs.append("b")
    nodes = [
        helper.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1], group=group),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"], epsilon=1e-3),
        helper.make_node("Relu", ["c" if conv_read_twice else "n"], ["r"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 9])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("n", "r")]
    return _model(nodes, [x], outs, inits)


@pytest.mark.parametrize("bias, group", [(False, 1), (True, 1), (True, 2)])
def test_a_batch_norm_after_a_convolution_is_folded_into_its_weights(bias, group):
    model = _conv_batch_norm(bias, group)
    prepared = onnx_prep.prepare(model, {"x": [1, 4, 8, 9]})
    assert [n.op_type for n in prepared.graph.node] == ["Conv", "Relu"]
    assert len(prepared.graph.node[0].input) == 3 and prepared.graph.node[0].output[0] == "n"
    assert {"w", "scale", "var"}.isdisjoint(_initializers(prepared))  # the folded constants replace them
    _same_outputs(model, prepared)


def test_a_batch_norm_is_not_folded_where_the_convolutions_output_is_read_elsewhere():
    model = _conv_batch_norm(True, conv_read_twice=True)
    prepared = onnx_prep.prepare(model, {"x": [1, 4, 8, 9]})
    assert [n.op_type for n in prepared.graph.node] == ["Conv", "BatchNormalization", "Relu"]
    _same_outputs(model, prepared)
