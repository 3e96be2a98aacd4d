"""A transposed convolution whose stride equals its kernel is compiled as a matmul
(``registry.tvm_side.transposed_convolutions``), and computes what TVM's own lowering of it computes, untuned and
tuned. Real TVM, a real tune of a tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from click.testing import CliRunner
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from registry.cli.main import cli
from registry.tvm_side.compile import compile_model, task_module
from registry.tvm_side.frontend import load_onnx
from registry.tvm_side.target import host_target
from tests.test_weight_layout import conv_then_transposed, run_main

pytestmark = pytest.mark.tvm


def _plain_tvm(loaded) -> object:
    """The module as plain TVM builds it: TOPI's ``conv2d_transpose`` over the zero-dilated input."""
    return relax.build(loaded.mod, target=host_target())


@pytest.mark.parametrize("kernel, as_matmul", [(2, True), (3, False)])
def test_a_transposed_convolution_with_its_stride_as_kernel_becomes_a_matmul_task(tmp_path, kernel, as_matmul):
    path = tmp_path / "m.onnx"
    conv_then_transposed(path, kernel=kernel)
    loaded = load_onnx(path)
    target = host_target()
    names = [t.task_name for t in ms.relax_integration.extract_tasks(task_module(loaded.mod, target), target)]
    assert any("conv2d_transpose" in n for n in names) != as_matmul, names
    assert any(n.startswith("matmul") for n in names) == as_matmul, names

    x = np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype("float32")
    got = run_main(compile_model(ms.database.MemoryDatabase(), loaded.mod, target), x)
    np.testing.assert_allclose(got, run_main(_plain_tvm(loaded), x), rtol=1e-5, atol=1e-6)


def test_the_tuned_matmul_form_computes_what_plain_tvm_computes(tmp_path):
    path, library = tmp_path / "m.onnx", tmp_path / "m.so"
    conv_then_transposed(path, kernel=2)
    db = f"sqlite:///{tmp_path / 'r.db'}"
    result = CliRunner().invoke(cli, ["--db", db, "tune", str(path), "--trials", "16", "--no-predictor", "-o",
                                      str(library)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "matmul" in result.output  # the task was tuned, under its own name

    x = np.random.default_rng(2).standard_normal((1, 8, 8, 8)).astype("float32")
    got = run_main(tvm.runtime.load_module(str(library)), x)
    np.testing.assert_allclose(got, run_main(_plain_tvm(load_onnx(path)), x), rtol=1e-4, atol=1e-5)
