"""The registry's softmax schedules carried onto plain TVM's softmax (``rebase.onto_inlined_steps``), which
``registry export -o`` replays for a plain ``compile_relax``: the registry's fast softmax has ``T_softmax_delta`` and
``T_fast_exp`` where plain TVM's has ``T_softmax_exp``, and every schedule of it inlines both. Real TVM: schedules
sampled from the registry kernel's design space, the moved ones built and run against numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from registry.records import rebase

pytestmark = pytest.mark.tvm

SHAPE = [4, 48]


def _kernels():
    """(target, the registry's softmax kernel, plain TVM's) of a one-Softmax ONNX model."""
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.s_tir import meta_schedule as ms

    from registry.tvm_side.compile import plain_module, task_module
    from registry.tvm_side.target import host_target

    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
    )  # fmt: skip
    mod = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), keep_params_in_input=False)
    target = host_target()

    def softmax(module):
        [task] = [t for t in ms.relax_integration.extract_tasks(module, target) if "softmax" in t.task_name]
        return task.dispatched[0]

    return target, softmax(task_module(mod, target)), softmax(plain_module(mod, target))


@pytest.fixture(scope="module")
def kernels():
    return _kernels()


def _traces(mod, target, count):
    from registry.pipeline.design_space import sample
    from registry.tvm_side.apply_trace import trace_json

    return [trace_json(c.sch) for c, _ in sample(mod, target, "fast_softmax", count, seed=0)]


def test_the_registrys_softmax_schedules_replay_on_plain_tvms_and_compute_the_softmax(kernels):
    import tvm

    from registry.tvm_side import apply_trace

    target, ours, plain = kernels
    ours_json, plain_json = str(tvm.ir.save_json(ours)), str(tvm.ir.save_json(plain))
    x = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    expected = np.exp(x - x.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    traces = _traces(ours, target, 4)
    assert len(traces) >= 3
    for trace in traces:
        assert apply_trace.replay(plain, target, trace) is None  # the blocks differ: replayed as it is, it fails
        moved = rebase.onto_inlined_steps(trace, ours_json, plain_json)
        assert (
            moved is not None and "T_fast_exp" not in json.dumps(moved) and "T_softmax_delta" not in json.dumps(moved)
        )
        sch = apply_trace.replay(plain, target, moved)
        assert sch is not None
        kept = [d[1] for d in moved[1]]  # the donor's decisions go with it, re-indexed
        assert kept and all(d in [d[1] for d in trace[1]] for d in kept)
        built = tvm.compile(sch.mod, target=target)
        out = tvm.runtime.tensor(np.zeros(SHAPE, "float32"))
        built["main"](tvm.runtime.tensor(x), out)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-7)
    # what `registry export -o` files for plain TVM's kernel: the moved schedule, with the donor record's latency
    from registry.share.plain_export import _replayed
    from registry.store.values import StoredWorkload

    kernel = StoredWorkload(1, "0", "structural", plain_json, [])
    found = _replayed(kernel, "softmax", [("fast_softmax", [(traces[0], [2e-6])], ours_json)], target)
    assert found is not None and found[1] == [2e-6] and "T_softmax_exp" in json.dumps(found[0]), found


def test_a_step_scheduled_otherwise_than_inlined_is_not_moved(kernels):
    import tvm

    target, ours, plain = kernels
    ours_json, plain_json = str(tvm.ir.save_json(ours)), str(tvm.ir.save_json(plain))
    trace = _traces(ours, target, 1)[0]
    insts, decisions = trace
    [fast_exp] = [i[3][0] for i in insts if i[0] == "GetSBlock" and i[2][0] == "T_fast_exp"]
    not_inlined = [[i for i in insts if not (i[0] == "ComputeInline" and i[1] == [fast_exp])], decisions]
    assert len(not_inlined[0]) == len(insts) - 1
    assert rebase.onto_inlined_steps(not_inlined, ours_json, plain_json) is None
    # the other way round the target has more steps of its own than the source: not the same schedule
    plain_trace = _traces(plain, target, 1)[0]
    assert rebase.onto_inlined_steps(plain_trace, plain_json, ours_json) is None
    # the same blocks: nothing to move (replay serves it as it is)
    assert rebase.onto_inlined_steps(trace, ours_json, ours_json) is None
    # a stored trace is someone's claim: one that is not sound, or that looks a step up twice, gives None
    again = [["GetSBlock", [], ["T_fast_exp", "main"], ["b99"]], ["ComputeInline", ["b99"], [], []]]
    not_a_kind = [["x"], ["b0"], [], []]
    past_the_end = [len(insts) + 5, 1]
    for bad in (
        [insts],
        "x",
        [insts, decisions, []],
        [[*insts, [1, 2]], decisions],
        [[not_a_kind, *insts], decisions],
        [insts, [*decisions, past_the_end]],
        [[*insts[:-1], *again, insts[-1]], decisions],
    ):
        assert rebase.onto_inlined_steps(bad, ours_json, plain_json) is None, bad
