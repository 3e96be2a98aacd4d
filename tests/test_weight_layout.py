"""Convolutions in the layout their tuned kernels read (``registry.tvm_side.compile``): on a CPU, a convolution
task is channels-last and its weight layout-free, and nothing else's is; its tuned records reorder the weight; every
write and read path (tune, import, verify, compile) handles the reordered weight; the compiled model folds the
reordering into the constant and computes what TVM's own build of the untouched module computes. Real TVM, a real
tune of a tiny model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from registry.cli.main import cli

pytestmark = pytest.mark.tvm


def _conv_then_dense(path) -> None:
    """x (1x8x8x8) -> 3x3 convolution to 16 channels -> relu -> flatten -> dense to 10: one task of each kind."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) / 8).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype("float32"), "b")
    d = numpy_helper.from_array((rng.standard_normal((1024, 10)) / 32).astype("float32"), "d")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "d"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv-dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [w, b, d],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _conv_pad_conv(path) -> None:
    """Two convolutions with an edge-mode pad between them, which has no layout rule in Relax (TVM's importer writes it
    as a TOPI kernel no Relax operator replaces: ``imported_kernels``)."""
    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) / 8).astype("float32"), n) for n in "uv")
    around = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], "int64"), "around")
    nodes = [
        helper.make_node("Conv", ["x", "u"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Pad", ["a", "around"], ["p"], mode="edge"),
        helper.make_node("Conv", ["p", "v"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv-pad-conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
        [w1, w2, around],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _buffers(func) -> list:
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return [argument.shape for argument in ArgInfo.from_prim_func(func)]


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_only_convolutions_are_layout_free_and_channels_last_and_only_on_a_cpu(tmp_path):
    from tvm.s_tir import meta_schedule as ms
    from tvm.target import Target

    from registry.tvm_side.compile import LAYOUT_FREE, task_module
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    _conv_then_dense(tmp_path / "m.onnx")
    loaded = load_onnx(tmp_path / "m.onnx")

    def marked(target) -> dict[str, bool]:
        tasks = ms.relax_integration.extract_tasks(task_module(loaded.mod, target), target)
        return {t.task_name: LAYOUT_FREE in (t.dispatched[0]["main"].attrs or {}) for t in tasks}

    # an AVX-512 CPU: its 16-lane vectors fill better along 16 channels than along 8-pixel rows (on AVX2 they tie,
    # and the model stays NCHW: compile._channels_fill_vectors); extracting tasks runs no code
    cpu = Target({**host_target().export(), "mcpu": "skylake-avx512"})
    on_cpu = marked(cpu)
    conv = ms.relax_integration.extract_tasks(task_module(loaded.mod, cpu), cpu)
    conv_args = [list(shape) for t in conv if "conv" in t.task_name for shape in _buffers(t.dispatched[0]["main"])]
    assert [1, 8, 8, 16] in conv_args and [1, 16, 8, 8] not in conv_args  # channels last on a CPU

    # ... but not where an operator between two convolutions would need transposes around it
    _conv_pad_conv(tmp_path / "pad.onnx")
    padded = load_onnx(tmp_path / "pad.onnx").mod
    kept = ms.relax_integration.extract_tasks(task_module(padded, host_target()), host_target())
    kept_args = [list(shape) for t in kept if "conv" in t.task_name for shape in _buffers(t.dispatched[0]["main"])]
    assert [1, 8, 6, 6] in kept_args and not any("transpose" in t.task_name for t in kept)
    assert [name for name, free in on_cpu.items() if free] == [n for n in on_cpu if "conv" in n] != []
    assert any("matmul" in name for name in on_cpu)
    assert not any(marked(Target({"kind": "cuda", "arch": "sm_90"})).values())


def test_tuned_convolutions_reorder_their_weight_once_at_compile_time_and_every_path_reads_them(tmp_path):
    import tvm

    import registry
    from registry.tvm_side.frontend import load_onnx

    model = tmp_path / "m.onnx"
    _conv_then_dense(model)
    db, other = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    _invoke("--db", db, "tune", str(model), "--trials", "24", "-o", str(tmp_path / "m.so"), "--json")

    # The tuned convolution's best record reorders its weight (RewriteLayout's preprocessing block)...
    rows = json.loads(_invoke("--db", db, "lookup", "--op", "conv2d", "--json"))["rows"]
    assert len(rows) == 1
    assert "layout_rewrite_preproc" in _invoke("--db", db, "show", rows[0]["workload"], "--device", "host")

    # ... which the compiled model runs once, folded into the constant weight, not per call ...
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype("float32")
    reference = tvm.compile(load_onnx(model).mod, target="llvm")  # TVM's default build: NCHW, no records
    expected = run_main(reference, x)
    from_api = registry.compile_model(load_onnx(model).mod, registry.database(db=db))
    for lib in (tvm.runtime.load_module(str(tmp_path / "m.so")), from_api):  # the CLI's export, and the API's
        np.testing.assert_allclose(run_main(lib, x), expected, rtol=1e-4, atol=1e-4)
    scheduled = _scheduled(model, db)
    assert any(gv.name_hint.endswith("_weight_prepack") for gv in scheduled.get_global_vars())  # it was split off
    assert "_weight_prepack" not in scheduled["main"].script()  # and folded: main never calls it

    # ... and that another registry imports (replaying each trace) and re-times at its claimed speed: the timing
    # passes the weight in the kernel's own layout, else the kernel would fail and the record be disputed.
    _invoke("--db", db, "export", "-o", str(tmp_path / "log"))
    _invoke("--db", other, "import", str(tmp_path / "log"))
    verified = _invoke("--db", other, "verify", "--tolerance", "3")
    assert " 0 disputed" in verified, verified


def _scheduled(model, db_url: str):
    """The model's Relax module as ``compile_model`` lowers it: records applied, weight reorderings folded."""
    import tvm

    import registry
    from registry.tvm_side.compile import with_records
    from registry.tvm_side.frontend import load_onnx

    target = registry.host_target()
    with target, registry.database(db=db_url), tvm.transform.PassContext(opt_level=3):
        return with_records(load_onnx(model).mod, target)


def run_main(executable, x: np.ndarray) -> np.ndarray:
    """A compiled model's (or a loaded library's) output on one input, in this process."""
    import tvm
    from tvm import relax

    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def conv_then_transposed(path, kernel: int = 3) -> None:
    """x (1x8x8x8) -> 3x3 convolution -> clip (bounds as inputs; 8 channels fill no more of a vector than 8-pixel
    rows, so the model stays NCHW, as PaddleOCR det does) -> transposed convolution with bias, stride 2, to 4
    channels, 1x16x16 -> sigmoid: a PaddleOCR det head's shape. Its kernel 2x2 (PaddleOCR's) is written as a matmul
    (``transposed_convolutions``); 3x3, padded, stays a transposed convolution."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) / 8).astype("float32"), "w")
    t = numpy_helper.from_array((rng.standard_normal((8, 4, kernel, kernel)) / 4).astype("float32"), "t")
    tb = numpy_helper.from_array(rng.standard_normal(4).astype("float32"), "tb")
    low, high = (numpy_helper.from_array(np.array(v, "float32"), n) for n, v in (("low", 0.0), ("high", 6.0)))
    padded = {} if kernel == 2 else {"pads": [1, 1, 1, 1], "output_padding": [1, 1]}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c", "low", "high"], ["r"]),
        helper.make_node("ConvTranspose", ["r", "t", "tb"], ["u"], strides=[2, 2], **padded),
        helper.make_node("Sigmoid", ["u"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv-transposed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
        [w, t, tb, low, high],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_a_transposed_convolution_keeps_its_weight_layout_and_the_tuned_model_computes_what_untuned_does(tmp_path):
    """A transposed convolution's reordered weight, split off and folded at compile time, made a tuned PaddleOCR
    det wrong in every output element: only convolutions proper are layout-free."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from registry.tvm_side.compile import LAYOUT_FREE, compile_model, task_module
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    path = tmp_path / "m.onnx"
    conv_then_transposed(path, kernel=3)
    loaded = load_onnx(path)
    tasks = ms.relax_integration.extract_tasks(task_module(loaded.mod, host_target()), host_target())
    free = {t.task_name: LAYOUT_FREE in (t.dispatched[0]["main"].attrs or {}) for t in tasks}
    assert [n for n, f in free.items() if f] == [n for n in free if "conv" in n and "transpose" not in n] != []
    assert any("conv2d_transpose" in n for n in free)

    db = f"sqlite:///{tmp_path / 'r.db'}"
    library = tmp_path / "m.so"
    _invoke("--db", db, "tune", str(path), "--trials", "32", "--no-predictor", "-o", str(library))
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype("float32")
    got = run_main(tvm.runtime.load_module(str(library)), x)
    untuned = compile_model(ms.database.MemoryDatabase(), loaded.mod, host_target())  # no record: no reordering
    np.testing.assert_allclose(got, run_main(untuned, x), rtol=1e-4, atol=1e-5)
