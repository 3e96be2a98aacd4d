"""The checked-in real exports (tests/fixtures/models, made by bench/corpus/make_fixtures.py) import and give tasks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from registry.errors import BadInputError
from registry.tvm_side import onnx_prep

FIXTURES = Path(__file__).parent / "fixtures" / "models"

# name -> (input shapes, plausible task count range); the counts seen when they were made: 18, 72, 31 (MobileNetV2: 52
# since its batch norms are folded into its convolutions)
MODELS = {
    "bert-tiny": ({"input_ids": [1, 16], "attention_mask": [1, 16]}, (12, 30)),
    "mobilenetv2-tiny": ({"pixel_values": [1, 3, 32, 32]}, (40, 100)),
    "swin-tiny": ({"pixel_values": [1, 3, 32, 32]}, (20, 45)),
}


def _ops(name: str) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(FIXTURES / f"{name}.onnx")).graph.node)


def _dynamic_reshapes(model: onnx.ModelProto) -> int:
    """Reshapes whose target is a Concat fed by a Gather of a Shape (through Unsqueeze/Cast): computed at run time."""
    producer = {out: node for node in model.graph.node for out in node.output}

    def source(name: str) -> onnx.NodeProto | None:
        node = producer.get(name)
        while node is not None and node.op_type in ("Unsqueeze", "Cast"):
            node = producer.get(node.input[0])
        return node

    count = 0
    for node in model.graph.node:
        concat = producer.get(node.input[1]) if node.op_type == "Reshape" else None
        if concat is not None and concat.op_type == "Concat":
            gathers = [g for g in map(source, concat.input) if g is not None and g.op_type == "Gather"]
            count += any(producer.get(g.input[0]) and producer[g.input[0]].op_type == "Shape" for g in gathers)
    return count


def test_the_fixtures_are_what_their_readme_says():
    bert, mobilenet = _ops("bert-tiny"), _ops("mobilenetv2-tiny")
    assert bert["Gather"] and bert["Erf"] and bert["Softmax"]
    assert mobilenet["BatchNormalization"] and mobilenet["Pad"]
    convs = [n for n in onnx.load(str(FIXTURES / "mobilenetv2-tiny.onnx")).graph.node if n.op_type == "Conv"]
    assert any(a.name == "group" and a.i > 1 for n in convs for a in n.attribute)  # depthwise
    for name in ("bert-tiny", "swin-tiny"):
        assert _dynamic_reshapes(onnx.load(str(FIXTURES / f"{name}.onnx"))) >= 5
    total = sum(p.stat().st_size for p in FIXTURES.glob("*.onnx"))
    assert total < 10 * 2**20


@pytest.mark.parametrize("name", sorted(MODELS))
def test_shape_arithmetic_folds_away(name):
    shapes, _ = MODELS[name]
    prepared = onnx_prep.prepare(onnx.load(str(FIXTURES / f"{name}.onnx")), shapes)
    ops = Counter(n.op_type for n in prepared.graph.node)
    assert ops["Shape"] == 0 and _dynamic_reshapes(prepared) == 0
    if name == "mobilenetv2-tiny":  # its 52 batch norms become the convolutions' weights and biases
        assert ops["BatchNormalization"] == 0 and ops["Conv"] == 52


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_fixture_imports_and_has_a_plausible_number_of_tasks(name):
    import tvm
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    shapes, (low, high) = MODELS[name]
    loaded = load_onnx(FIXTURES / f"{name}.onnx", shapes, name=name)
    assert loaded.input_shapes == shapes
    tasks = extract_tasks(tvm.relax.get_pipeline("zero")(loaded.mod), host_target())
    assert low <= len(tasks) <= high
    kinds = " ".join(t.task_name for t in tasks)
    assert ("matmul" in kinds) if name != "mobilenetv2-tiny" else ("conv2d" in kinds)


def test_an_unsupported_operator_inside_an_if_branch_is_named():
    """silero-vad's LSTM is only inside If branches: the check must look there, not leave it to a deep TVM error."""
    from registry.tvm_side.frontend import load_onnx

    def branch(node: onnx.NodeProto) -> onnx.GraphProto:
        out = helper.make_tensor_value_info(node.output[-1], TensorProto.FLOAT, [1, 1, 2])
        return helper.make_graph([node], node.op_type, [], [out])

    lstm = helper.make_node("LSTM", ["x", "w", "r"], ["", "y_lstm"], hidden_size=2)  # Y_h: 1 x batch x hidden
    nodes = [
        helper.make_node("Cast", ["flag"], ["cond"], to=TensorProto.BOOL),
        helper.make_node("If", ["cond"], ["y"], then_branch=branch(lstm),
                         else_branch=branch(helper.make_node("Relu", ["x"], ["y_relu"]))),
    ]  # fmt: skip
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2]),
        helper.make_tensor_value_info("flag", TensorProto.INT64, []),
    ]
    weights = [numpy_helper.from_array(np.zeros((1, 8, 2), dtype=np.float32), n) for n in ("w", "r")]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2])
    graph = helper.make_graph(nodes, "g", inputs, [output], initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(BadInputError, match=r"^vad: TVM's ONNX importer does not support the operator\(s\) LSTM$"):
        load_onnx(model.SerializeToString(), name="vad")
