"""The importer's TIR kernels for ``Clip`` and ``Pad`` made Relax operators (``registry.tvm_side.imported_kernels``),
and what that lets ``compile._channels_last`` convert: a MobileNetV2 block (1x1 expansion, ReLU6, a ``Pad``, a
depthwise 3x3 convolution, ReLU6, a 1x1 projection) stays NCHW as the importer gives it and converts once they are
Relax operators. Real TVM: each rewritten module is built and computes what the importer's does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.tvm


def _mobilenet_block(path, pad_value: float = 0.0, unit_pad: bool = True, size: tuple = (6, 6)) -> None:
    """x (1x8x6x6, or 1x8x``size``) -> 1x1 convolution to 16 -> Clip(0, 6) -> Pad 1 (by ``pad_value``) -> depthwise
    3x3 -> Clip(0, 6) -> a Pad of nothing (``unit_pad``: HF's exports have them) -> 1x1 convolution to 8, as
    MobileNetV2's exports write a block."""
    rng = np.random.default_rng(0)
    arrays = {
        "expand": rng.standard_normal((16, 8, 1, 1)) / 3,
        "dw": rng.standard_normal((16, 1, 3, 3)) / 3,
        "project": rng.standard_normal((8, 16, 1, 1)) / 3,
        "low": np.array(0.0),
        "high": np.array(6.0),
        "value": np.array(pad_value),
    }
    weights = [numpy_helper.from_array(v.astype("float32"), k) for k, v in arrays.items()]
    weights += [
        numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], "int64"), "around"),
        numpy_helper.from_array(np.zeros(8, "int64"), "nothing"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "expand"], ["e"]),
        helper.make_node("Clip", ["e", "low", "high"], ["e6"]),
        helper.make_node("Pad", ["e6", "around", "value"], ["p"]),
        helper.make_node("Conv", ["p", "dw"], ["d"], group=16),
        helper.make_node("Clip", ["d", "low", "high"], ["d6"]),
        helper.make_node("Pad", ["d6", "nothing"], ["u"]) if unit_pad else helper.make_node("Identity", ["d6"], ["u"]),
        helper.make_node("Conv", ["u", "project"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mobilenet-block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, *size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, *size])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _outputs(mod, x):
    import tvm

    return _outputs_of(tvm.compile(mod, target="llvm"), x)


def _calls_of_tir(mod) -> int:
    return mod["main"].script().count("R.call_tir")


def test_clip_bounds_and_pads_become_relax_operators_that_compute_the_same(tmp_path):
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.imported_kernels import as_relax_operators

    _mobilenet_block(tmp_path / "block.onnx")
    mod = load_onnx(tmp_path / "block.onnx").mod
    assert _calls_of_tir(mod) == 6  # two maximums, two minimums, two pads
    relaxed = as_relax_operators(mod)
    script = relaxed["main"].script()
    assert _calls_of_tir(relaxed) == 0
    assert script.count("R.maximum") == 2 and script.count("R.minimum") == 2
    assert script.count("R.nn.pad") == 1  # the pad of nothing is gone

    x = np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype("float32") * 4
    np.testing.assert_allclose(_outputs(relaxed, x), _outputs(mod, x), rtol=1e-6, atol=1e-6)


def test_a_kernel_no_relax_operator_computes_stays_as_it_is(tmp_path):
    """A pad by ones reads like a pad by zeros except for its value: the check against the legalized operator keeps
    it a call_tir (rewritten, the model would compute something else)."""
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.imported_kernels import as_relax_operators

    _mobilenet_block(tmp_path / "block.onnx", pad_value=1.0, unit_pad=False)
    mod = load_onnx(tmp_path / "block.onnx").mod
    relaxed = as_relax_operators(mod)
    assert _calls_of_tir(relaxed) == 1 and "R.nn.pad" not in relaxed["main"].script()
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype("float32")
    np.testing.assert_allclose(_outputs(relaxed, x), _outputs(mod, x), rtol=1e-6, atol=1e-6)


def test_a_mobilenet_block_converts_to_channels_last_through_its_pads_and_clips(tmp_path):
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from registry.tvm_side.compile import _channels_last, compile_model
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target
    from registry.tvm_side.transposes import count_transposes, sink_transposes

    _mobilenet_block(tmp_path / "block.onnx")
    mod = load_onnx(tmp_path / "block.onnx").mod
    target = host_target()
    with target:  # as the importer gives it, each TIR kernel keeps a transpose in and one out
        direct = sink_transposes(relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod))
    assert count_transposes(direct) > 2

    converted = _channels_last(mod, target)
    assert converted["main"].script().count('data_layout="NHWC"') == 3
    assert count_transposes(converted) == 2  # the model's input and output

    x = np.random.default_rng(2).standard_normal((1, 8, 6, 6)).astype("float32") * 4
    got = _outputs_of(compile_model(ms.database.MemoryDatabase(), mod, target), x)  # TVM's default schedules
    np.testing.assert_allclose(got, _outputs(mod, x), rtol=1e-4, atol=1e-5)


def test_a_block_whose_rows_fill_vectors_better_than_its_channels_stays_nchw(tmp_path):
    """The same block on 4x64 maps: rows of 64 fill any vector, 8 and 16 channels no better (a PaddleOCR
    classifier's 48x192 input: 0.53x onnxruntime NCHW, 0.91x channels-last)."""
    from registry.tvm_side.compile import _channels_last
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    _mobilenet_block(tmp_path / "block.onnx", size=(4, 64))
    mod = load_onnx(tmp_path / "block.onnx").mod
    assert 'data_layout="NHWC"' not in _channels_last(mod, host_target()).script()


def _outputs_of(exe, x):
    import tvm
    from tvm import relax

    return relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
