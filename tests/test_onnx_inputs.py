"""Input specs for timing real models: token ids within the vocabulary, masks of ones, floats normal. No TVM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from registry.tvm_side import onnx_prep
from registry.tvm_side.onnx_inputs import InputSpec, input_specs, make_inputs

FIXTURES = Path(__file__).parent / "fixtures" / "models"


def _table(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)


def _tiny() -> onnx.ModelProto:
    """ids reach two embedding tables (50 and 20 rows) through Cast and Unsqueeze; pos reaches the columns of a
    3 x 7 table (Gather axis 1); mask only multiplies; x is a float; ids2 is the data of a Gather, not its indices."""
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Unsqueeze", ["ids32", "axes"], ["ids_u"]),
        helper.make_node("Gather", ["words", "ids_u"], ["e1"]),
        helper.make_node("Identity", ["ids"], ["ids_i"]),
        helper.make_node("Gather", ["small", "ids_i"], ["e2"]),
        helper.make_node("Gather", ["cols", "pos"], ["e3"], axis=1),
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "maskf"], ["y"]),
        helper.make_node("Gather", ["ids2", "zero"], ["e4"]),
    ]
    inputs = [
        helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"]),
        helper.make_tensor_value_info("pos", TensorProto.INT32, ["s"]),
        helper.make_tensor_value_info("mask", TensorProto.INT64, ["b", "s"]),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s"]),
        helper.make_tensor_value_info("ids2", TensorProto.INT64, ["s"]),
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("e1", "e2", "e3", "y")]
    inits = [
        _table("words", (50, 4)),
        _table("small", (20, 4)),
        _table("cols", (3, 7)),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
    ]
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_each_input_gets_its_kind_and_range():
    shapes = {"ids": [2, 5], "pos": [5], "mask": [2, 5], "x": [2, 5], "ids2": [5]}
    specs = {s.name: s for s in input_specs(_tiny(), shapes)}
    assert list(specs) == ["ids", "pos", "mask", "x", "ids2"]  # graph order
    assert specs["ids"] == InputSpec("ids", (2, 5), "int64", "index", 0, 20)  # the smaller of the two tables
    assert specs["pos"] == InputSpec("pos", (5,), "int32", "index", 0, 7)  # axis 1 of a 3 x 7 table
    assert specs["mask"].kind == "ones" and specs["mask"].dtype == "int64"
    assert specs["x"].kind == "normal" and specs["x"].dtype == "float32"
    assert specs["ids2"].kind == "ones"  # the data of a Gather, not its indices


def test_make_inputs_is_seeded_and_in_range():
    shapes = {"ids": [4, 64], "pos": [64], "mask": [4, 64], "x": [4, 64], "ids2": [64]}
    specs = input_specs(_tiny(), shapes)
    a, b, c = make_inputs(specs, seed=3), make_inputs(specs, seed=3), make_inputs(specs, seed=4)
    for name in a:
        assert np.array_equal(a[name], b[name])
        assert a[name].shape == tuple(shapes[name])
    assert not np.array_equal(a["ids"], c["ids"])
    assert a["ids"].dtype == np.int64 and 0 <= a["ids"].min() and a["ids"].max() < 20
    assert a["ids"].max() > 10  # drawn across the range, not a constant
    assert a["pos"].dtype == np.int32 and a["pos"].max() < 7
    assert (a["mask"] == 1).all() and a["mask"].dtype == np.int64
    assert a["x"].dtype == np.float32 and abs(float(a["x"].std()) - 1) < 0.3


def test_the_fixture_bert_gets_token_ids_below_its_vocabulary_and_runs():
    model = onnx.load(str(FIXTURES / "bert-tiny.onnx"))
    shapes = onnx_prep.fixed_input_shapes(model, {"input_ids": [1, 16], "attention_mask": [1, 16]})
    specs = input_specs(model, shapes)
    assert [(s.name, s.dtype, s.kind, s.high) for s in specs] == [
        ("input_ids", "int64", "index", 256),
        ("attention_mask", "int64", "ones", 2),
    ]
    feeds = make_inputs(specs, seed=0)
    (hidden,) = ReferenceEvaluator(model).run(None, feeds)
    assert hidden.shape == (1, 16, 32) and np.isfinite(hidden).all()
