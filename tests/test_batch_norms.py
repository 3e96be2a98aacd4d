"""A batch norm after a convolution is folded into it in the Relax module (``registry.tvm_side.batch_norms``), so a
model a user imports with TVM's own ``from_onnx`` has the kernels of the CLI's, which folds them in the ONNX graph;
the folded model computes what the model computes. Real TVM, models built in code."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_ffi
from onnx.reference import ReferenceEvaluator
from tvm.relax.frontend.onnx import from_onnx
from tvm.s_tir import meta_schedule as ms

from registry.tvm_side import onnx_prep
from registry.tvm_side.batch_norms import batch_norms_into_convolutions
from registry.tvm_side.compile import compile_model, task_module
from registry.tvm_side.target import host_target
from tests.test_onnx_prep import _conv_batch_norm

pytestmark = pytest.mark.tvm

SHAPE = [1, 4, 8, 9]


def _imported(model):
    return from_onnx(model, shape_dict={"x": SHAPE}, keep_params_in_input=False)


def _outputs(executable, x: np.ndarray) -> list[np.ndarray]:
    import tvm
    from tvm import relax

    return [t.numpy() for t in relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x))]


@pytest.mark.parametrize("bias, group", [(False, 1), (True, 1), (True, 2)])
def test_a_batch_norm_after_a_convolution_is_folded_and_computes_the_same(bias, group):
    model = _conv_batch_norm(bias, group)
    folded = batch_norms_into_convolutions(_imported(model))
    assert "batch_norm" not in folded.script()
    x = np.random.default_rng(3).standard_normal(SHAPE).astype("float32")
    got = _outputs(compile_model(ms.database.MemoryDatabase(), _imported(model), host_target(), exact_math=True), x)
    for want, have in zip(ReferenceEvaluator(model).run(None, {"x": x}), got, strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


def test_a_convolution_read_elsewhere_keeps_its_batch_norm():
    """Folding would compute the convolution twice: once for its other reader, once folded."""
    module = batch_norms_into_convolutions(_imported(_conv_batch_norm(True, conv_read_twice=True)))
    assert "batch_norm" in module.script() and module.script().count("conv2d(") == 1


@pytest.mark.parametrize("bias", [False, True])
def test_from_onnx_and_the_clis_preparation_give_the_same_tasks(bias):
    """The door that matters: records tuned through the CLI (batch norms folded in ONNX) apply to the kernels of a
    module imported with from_onnx, as the same workloads."""
    model = _conv_batch_norm(bias)
    target = host_target()

    def workloads(mod) -> list[int]:
        found = ms.relax_integration.extract_tasks(task_module(mod, target), target)
        return sorted(tvm_ffi.structural_hash(t.dispatched[0]) for t in found)

    cli = _imported(onnx_prep.prepare(model, {"x": SHAPE}))
    assert "batch_norm" not in cli.script()
    assert workloads(_imported(model)) == workloads(cli)
