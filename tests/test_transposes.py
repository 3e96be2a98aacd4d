"""Transposes moved past elementwise operators until they cancel (``registry.tvm_side.transposes``), and what that
lets ``compile._channels_last`` convert: a ConvNeXt-shaped block, whose channels-last layer norm sits between two
transposes and whose residual ``add`` ``ConvertLayout`` leaves in NCHW. Real TVM: the rewritten module is built and
computes what the original computes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.tvm


def _module():
    """a, b NHWC; both to NCHW, added, clipped, scaled by a scalar, back to NHWC, added to a: 3 transposes, all of
    which cancel; and one more (c's) that feeds a reduction, which no rule moves."""
    import tvm
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Module:
        @R.function
        def main(
            a: R.Tensor((1, 4, 4, 8), "float32"),
            b: R.Tensor((1, 4, 4, 8), "float32"),
            c: R.Tensor((1, 4, 4, 8), "float32"),
        ):
            with R.dataflow():
                p = R.permute_dims(a, (0, 3, 1, 2))
                q = R.permute_dims(b, (0, 3, 1, 2))
                r = R.clip(R.add(p, q), 0, 6)
                s = R.multiply(r, R.const(0.5, "float32"))
                t = R.add(R.permute_dims(s, (0, 2, 3, 1)), a)
                u = R.sum(R.permute_dims(c, (0, 3, 1, 2)), axis=[3])
                R.output(t, u)
            return (t, u)

    return Module


def _run(mod, inputs):
    import tvm

    return _outputs(tvm.compile(mod, target="llvm"), inputs)


def _outputs(exe, inputs) -> list:
    import tvm
    from tvm import relax

    out = relax.VirtualMachine(exe, tvm.cpu())["main"](*(tvm.runtime.tensor(i) for i in inputs))
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]  # one output, or a tuple


def test_transposes_sink_past_elementwise_operators_and_cancel():
    from registry.tvm_side.transposes import count_transposes, sink_transposes

    mod = _module()
    sunk = sink_transposes(mod)
    assert count_transposes(mod) == 4
    assert count_transposes(sunk) == 1  # c's, before the reduction
    inputs = [np.random.default_rng(i).standard_normal((1, 4, 4, 8)).astype("float32") * 4 for i in range(3)]
    for got, want in zip(_run(sunk, inputs), _run(mod, inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _convnext_block(path) -> None:
    """x (1x8x6x6) -> 3x3 depthwise convolution -> to channels-last -> layer norm -> dense -> back to NCHW -> + x ->
    1x1 convolution: a ConvNeXt block and its downsampling, as transformers exports them."""
    rng = np.random.default_rng(0)
    arrays = {
        "dw": rng.standard_normal((8, 1, 3, 3)) / 3,
        "gamma": np.ones(8),
        "beta": np.zeros(8),
        "dense": rng.standard_normal((8, 8)) / 3,
        "pw": rng.standard_normal((16, 8, 1, 1)) / 3,
    }
    weights = [numpy_helper.from_array(v.astype("float32"), k) for k, v in arrays.items()]
    nodes = [
        helper.make_node("Conv", ["x", "dw"], ["d"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Transpose", ["d"], ["dl"], perm=[0, 2, 3, 1]),
        helper.make_node("LayerNormalization", ["dl", "gamma", "beta"], ["n"], axis=-1),
        helper.make_node("MatMul", ["n", "dense"], ["m"]),
        helper.make_node("Transpose", ["m"], ["mf"], perm=[0, 3, 1, 2]),
        helper.make_node("Add", ["x", "mf"], ["r"]),
        helper.make_node("Conv", ["r", "pw"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "convnext-block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_a_convnext_block_converts_to_channels_last_and_computes_the_same(tmp_path):
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from registry.tvm_side.compile import compile_model, task_module
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target
    from registry.tvm_side.transposes import count_transposes

    _convnext_block(tmp_path / "block.onnx")
    mod = load_onnx(tmp_path / "block.onnx").mod
    converted = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)
    assert count_transposes(converted) > count_transposes(mod) + 2  # what ConvertLayout alone leaves

    target = host_target()
    tasks = ms.relax_integration.extract_tasks(task_module(mod, target), target)
    convolutions = [t for t in tasks if "conv" in t.task_name]
    assert len(convolutions) == 2
    for task in convolutions:  # both read and write channels-last: [1, 6, 6, channels]
        shapes = [list(a.shape) for a in ArgInfo.from_prim_func(task.dispatched[0]["main"])]
        assert shapes[0] == [1, 6, 6, 8] and shapes[-1][:3] == [1, 6, 6], shapes

    x = np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype("float32")
    got = _outputs(compile_model(ms.database.MemoryDatabase(), mod, target), [x])[0]  # TVM's default schedules
    want = _run(mod, [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _conv1d_block(path) -> None:
    """x (1x16x8: length 16, 8 channels, as a Keras model stores it) -> a 1-d convolution as a 2-d one (unsqueeze, to
    NCHW, 3x1 kernel, squeeze) -> Max with a constant: magika's shape. ONNX's Max of two tensors imports as a stack
    and a reduction, on which ``ConvertLayout`` fails."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((12, 8, 3, 1)) / 3).astype("float32"), "w"),
        numpy_helper.from_array(np.array([3], "int64"), "axis3"),
        numpy_helper.from_array(np.zeros((1, 12, 14), "float32"), "floor"),
    ]
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axis3"], ["u"]),
        helper.make_node("Transpose", ["u"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Conv", ["t", "w"], ["c"]),
        helper.make_node("Squeeze", ["c", "axis3"], ["s"]),
        helper.make_node("Max", ["s", "floor"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv1d-block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 14])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_a_model_convertlayout_fails_on_has_each_convolution_made_channels_last_on_its_own(tmp_path):
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from registry.tvm_side.compat import TVM_ERRORS
    from registry.tvm_side.compile import _channels_last, compile_model
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target
    from registry.tvm_side.transposes import count_transposes

    _conv1d_block(tmp_path / "block.onnx")
    mod = load_onnx(tmp_path / "block.onnx").mod
    with pytest.raises(TVM_ERRORS):  # what the fallback is for
        relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)

    target = host_target()
    converted = _channels_last(mod, target)
    assert 'data_layout="NHWC"' in converted.script() and 'kernel_layout="OHWI"' in converted.script()
    # the model's own transpose to NCHW and the one into NHWC make one that moves only a unit axis: a reshape;
    # the one out of the convolution stays
    assert count_transposes(mod) == 1 and count_transposes(converted) == 1

    x = np.random.default_rng(1).standard_normal((1, 16, 8)).astype("float32")
    got = _outputs(compile_model(ms.database.MemoryDatabase(), mod, target), [x])[0]  # TVM's default schedules
    want = _run(mod, [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_only_a_transpose_that_moves_unit_axes_becomes_a_reshape():
    import tvm
    from tvm.script import relax as R

    from registry.tvm_side.transposes import count_transposes, unit_transposes_as_reshapes

    @tvm.script.ir_module
    class Module:
        @R.function
        def main(a: R.Tensor((1, 4, 1, 8), "float32")):
            with R.dataflow():
                p = R.permute_dims(a, (0, 2, 1, 3))  # (1, 1, 4, 8): the same order of elements
                q = R.permute_dims(a, (0, 3, 2, 1))  # (1, 8, 1, 4): 4 and 8 swap
                R.output(p, q)
            return (p, q)

    rewritten = unit_transposes_as_reshapes(Module)
    assert count_transposes(Module) == 2 and count_transposes(rewritten) == 1
    a = np.random.default_rng(0).standard_normal((1, 4, 1, 8)).astype("float32")
    for got, want in zip(_run(rewritten, [a]), _run(Module, [a]), strict=True):
        np.testing.assert_array_equal(got, want)


def _detector(path, activation: str) -> None:
    """x (1x3x24x24) -> a 3x3 convolution -> activation -> a strided 3x3 one -> activation -> two heads, one per scale
    (a 1x1 convolution each, the second after a strided one), each reshaped to (1, 6, pixels) and concatenated: a
    YOLO's shape. ``activation``: "silu" (sigmoid times input: elementwise, follows any layout), "clip" (ONNX's
    Clip with its bounds as inputs, which imports as TOPI kernels, made Relax operators by ``imported_kernels``), or
    "edge" (SiLU, and the strided convolutions padded by an ONNX ``Pad`` in "edge" mode: a TOPI kernel no Relax
    operator replaces, so no layout rule sees into it)."""
    rng = np.random.default_rng(0)

    def w(name, shape):
        scaled = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        return numpy_helper.from_array(scaled.astype("float32"), name)

    weights = [w("w1", (16, 3, 3, 3)), w("w2", (32, 16, 3, 3)), w("w3", (32, 32, 3, 3)), w("h1", (6, 32, 1, 1)),
               w("h2", (6, 32, 1, 1)), numpy_helper.from_array(np.array([1, 6, -1], "int64"), "flat"),
               numpy_helper.from_array(np.array(0.0, "float32"), "lo"),
               numpy_helper.from_array(np.array(6.0, "float32"), "hi"),
               numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], "int64"), "around")]  # fmt: skip
    nodes = []

    def act(x, y):
        if activation in ("silu", "edge"):
            nodes.extend([helper.make_node("Sigmoid", [x], [y + "_s"]), helper.make_node("Mul", [x, y + "_s"], [y])])
        else:
            nodes.append(helper.make_node("Clip", [x, "lo", "hi"], [y]))

    nodes.append(helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]))
    act("c1", "a1")

    def strided(x, w, y):
        if activation == "edge":
            nodes.append(helper.make_node("Pad", [x, "around"], [x + "_p"], mode="edge"))
            nodes.append(helper.make_node("Conv", [x + "_p", w], [y], strides=[2, 2]))
        else:
            nodes.append(helper.make_node("Conv", [x, w], [y], pads=[1, 1, 1, 1], strides=[2, 2]))

    strided("a1", "w2", "c2")
    act("c2", "a2")
    strided("a2", "w3", "c3")
    act("c3", "a3")
    for head, source in (("h1", "a2"), ("h2", "a3")):
        nodes.append(helper.make_node("Conv", [source, head], [head + "_c"]))
        nodes.append(helper.make_node("Reshape", [head + "_c", "flat"], [head + "_r"]))
    nodes.append(helper.make_node("Concat", ["h1_r", "h2_r"], ["y"], axis=2))
    graph = helper.make_graph(
        nodes,
        "detector",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 180])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("activation, converts", [("silu", True), ("clip", True), ("edge", False)])
def test_a_detector_converts_unless_transposes_sit_between_its_convolutions(tmp_path, activation, converts):
    """With SiLU or a Clip every operator between the convolutions follows the layout: the transposes left are the
    input's and one per head, before the reshapes (more than the model's inputs and outputs, which an earlier rule
    counted, but a small share of what the convolutions write), and the model converts. With an edge-mode Pad before
    each strided convolution, each pad sits between two transposes of a whole feature map, and the model stays NCHW.
    Either way it computes what it computed."""
    from tvm.s_tir import meta_schedule as ms

    from registry.tvm_side.compile import _channels_last, compile_model
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target
    from registry.tvm_side.transposes import count_transposes

    _detector(tmp_path / "detector.onnx", activation)
    mod = load_onnx(tmp_path / "detector.onnx").mod
    target = host_target()
    converted = _channels_last(mod, target)
    assert ('data_layout="NHWC"' in converted.script()) is converts
    if converts:
        assert count_transposes(converted) == 3  # the input's and one per head: more than the old rule allowed

    x = np.random.default_rng(1).standard_normal((1, 3, 24, 24)).astype("float32")
    got = _outputs(compile_model(ms.database.MemoryDatabase(), mod, target), [x])[0]  # TVM's default schedules
    want = _run(mod, [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
