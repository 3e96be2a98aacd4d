"""Fast math on a CPU: erf, exp, tanh and softmax become TVM's approximations, and powers by 2-4 multiplications
(``registry.tvm_side.compile.fast_math``, in the pipeline every door runs), unless the user asks for exact ones; the
approximations keep the model's outputs, and a GPU module is left alone. Real TVM."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from registry.cli.main import cli

pytestmark = pytest.mark.tvm


def _gelu_softmax_onnx() -> bytes:
    """x (8x64) @ w -> erf GELU -> tanh -> softmax: every function the transform replaces, in one small graph."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype("float32") / 8, "w")
    half, sqrt2, one = (numpy_helper.from_array(np.array(v, "float32"), n) for n, v in
                        (("half", 0.5), ("sqrt2", 2**0.5), ("one", 1.0)))  # fmt: skip
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["hs"]),
        helper.make_node("Erf", ["hs"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["g0"]),
        helper.make_node("Mul", ["g0", "half"], ["g"]),
        helper.make_node("Tanh", ["g"], ["t"]),
        helper.make_node("Softmax", ["t"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu-softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])],
        [w, half, sqrt2, one],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _run(mod, target, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_the_cpu_module_is_approximated_and_computes_the_same():
    from registry.tvm_side.compile import fast_math
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    target = host_target()
    exact = load_onnx(_gelu_softmax_onnx(), name="m")
    fast = fast_math(exact.mod)
    text = fast.script()
    assert all(f in text for f in ("fast_erf", "fast_tanh", "fast_softmax")), text[:2000]
    assert "fast_" not in exact.mod.script()  # the loaded model itself is not changed
    x = np.random.default_rng(1).standard_normal((8, 64)).astype("float32") * 3
    want, got = _run(exact.mod, target, x), _run(fast, target, x)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def _powers_onnx() -> bytes:
    """GPT-2's GELU, x + 0.044715 * x**3 inside a tanh, beside a power by 2.5 (which stays a power)."""
    consts = [numpy_helper.from_array(np.array(v, "float32"), n) for n, v in
              (("three", 3.0), ("k", 0.044715), ("two_and_half", 2.5))]  # fmt: skip
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["x3"]),
        helper.make_node("Mul", ["x3", "k"], ["kx3"]),
        helper.make_node("Add", ["x", "kx3"], ["inner"]),
        helper.make_node("Tanh", ["inner"], ["t"]),
        helper.make_node("Abs", ["x"], ["ax"]),
        helper.make_node("Pow", ["ax", "two_and_half"], ["p"]),
        helper.make_node("Add", ["t", "p"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "powers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])],
        consts,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_power_by_a_small_integer_becomes_multiplications_and_computes_the_same():
    from registry.tvm_side.compile import fast_math
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    target = host_target()
    exact = load_onnx(_powers_onnx(), name="m")
    assert exact.mod.script().count("R.power(") == 2
    fast = fast_math(exact.mod).script()
    assert fast.count("R.power(") == 1 and 'R.const(2.5, "float32")' in fast, fast
    x = np.random.default_rng(2).standard_normal((8, 64)).astype("float32") * 3
    want, got = _run(exact.mod, target, x), _run(fast_math(exact.mod), target, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_pipeline_approximates_on_a_cpu_unless_asked_not_to_and_never_on_a_gpu():
    import tvm

    from registry.tvm_side.compile import task_module
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    mod = load_onnx(_gelu_softmax_onnx(), name="m").mod
    assert "fast_erf" in task_module(mod, host_target()).script()
    assert "fast_" not in task_module(mod, host_target(), exact_math=True).script()
    assert "fast_" not in task_module(mod, tvm.target.Target({"kind": "cuda", "arch": "sm_90"})).script()


@pytest.mark.parametrize("flags, erf", [([], "fast_erf"), (["--exact-math"], "erf")])
def test_transfer_compiles_what_the_flag_asks_for(tmp_path, sqlite_url, flags, erf):
    path = tmp_path / "m.onnx"
    path.write_bytes(_gelu_softmax_onnx())
    onnx.checker.check_model(str(path))
    result = CliRunner().invoke(
        cli, ["--db", sqlite_url, "transfer", str(path), "--tune-trials", "0", *flags, "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    names = [t["name"] for t in report["tasks"]]
    assert any(erf in n for n in names) and (erf == "fast_erf" or not any("fast_" in n for n in names)), names
    assert report["final_ms"] is not None, report["errors"]


def test_a_loaded_model_is_fast_math_and_keeps_its_inputs_bounds():
    """``load_onnx``'s model computes with fast math unless a caller asks otherwise, and its token ids are drawn
    within their table (its bounds once landed in ``exact_math``, positionally: benchmarks loading a model directly
    then built it with exact math, and integer inputs lost their bounds)."""
    from pathlib import Path

    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.onnx_inputs import Bound

    path = Path(__file__).parent / "fixtures" / "models" / "bert-tiny.onnx"
    loaded = load_onnx(path, {"input_ids": [1, 16], "attention_mask": [1, 16]})
    assert loaded.exact_math is False
    assert {i.name: i.bound for i in loaded.inputs} == {"input_ids": Bound(0, 256), "attention_mask": Bound(1, 2)}
