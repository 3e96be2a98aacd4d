"""The checks that need no TVM: latencies, trace shape, and each decision against its own instruction."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest

from registry import testing
from registry.errors import BadInputError
from registry.store.sql.store import Store
from registry.store.validation import (
    MAX_RUN_SECS,
    Problem,
    Refusals,
    SkeletonCache,
    TraceProblem,
    check_trace,
    parse_skeleton,
    read_decisions,
    record_problems,
    run_secs_problem,
    tile_problem,
    trace_is_sound,
)
from tests.rows import rows_of

# A trace as MetaSchedule writes one for a matmul on CPU (abridged): tiles, a compute location, an unroll choice.
INSTS = [
    ["GetSBlock", [], ["matmul", "main"], ["b0"]],
    ["GetLoops", ["b0"], [], ["l1", "l2", "l3"]],
    ["SamplePerfectTile", ["l1"], [4, 64], ["v4", "v5", "v6", "v7"]],
    ["Split", ["l1", "v4", "v5", "v6", "v7"], [1, 0], ["l8", "l9", "l10", "l11"]],
    ["SampleComputeLocation", ["b0"], [], ["l12"]],
    ["SampleCategorical", [], [[0, 16, 64, 512], [0.25, 0.25, 0.25, 0.25]], ["v13"]],
    ["EnterPostproc", [], [], []],
    ["Parallel", ["l8"], [], []],
]
DECISIONS = [[2, [2, 4, 1, 8]], [4, -1], [5, 3]]


def _trace(decisions=DECISIONS, insts=INSTS):
    return [copy.deepcopy(insts), copy.deepcopy(decisions)]


def _check(trace):
    insts, decisions = trace
    skeleton = parse_skeleton(insts)
    return skeleton, read_decisions(skeleton, decisions)


def test_a_well_formed_trace_passes():
    skeleton, decisions = _check(_trace())
    assert skeleton.prefix == 6 and skeleton.locations == (4,)
    assert decisions == {2: [2, 4, 1, 8], 4: -1, 5: 3}
    assert trace_is_sound(_trace())


def _replace(index: int, value) -> list:
    return [[i, value if i == index else v] for i, v in DECISIONS]


BAD_TRACES = {
    "decision past the last instruction": (DECISIONS + [[100001, 0]], "for instruction 100001, but the trace has 8"),
    "negative instruction index": (DECISIONS + [[-1, 0]], "for instruction -1"),
    "decision of an instruction that samples nothing": (DECISIONS + [[3, [1, 2]]], "samples nothing"),
    "two decisions for one instruction": (DECISIONS + [[5, 2]], "two decisions for instruction 5"),
    "missing decision": (DECISIONS[:2], "instruction 5 \\(SampleCategorical\\) has no decision"),
    "zero tile size": (_replace(2, [2, 0, 1, 32]), "not positive loop sizes"),
    "negative tile size": (_replace(2, [-2, 2, 1, 32]), "not positive loop sizes"),
    "too few tile sizes": (_replace(2, [8, 8]), "is not 4 tile sizes"),
    "tile size past 32 bits": (_replace(2, [2**40, 1, 1, 1]), "not positive loop sizes"),
    "tile sizes that are not integers": (_replace(2, [2.0, 4, 1, 8]), "is not 4 tile sizes"),
    "categorical past its candidates": (_replace(5, 4), "picks none of its 4 candidates"),
    "categorical that wraps to 0 in 32 bits": (_replace(5, 2**32), "picks none of its 4 candidates"),
    "categorical that is a list": (_replace(5, [1]), "is not an integer"),
    "compute location below -2": (_replace(4, -3), "is no compute location"),
    "decision that is not a pair": (DECISIONS + [[2]], "is not \\[instruction index, value\\]"),
    "boolean index": ([[True, 0]] + DECISIONS, "is not \\[instruction index, value\\]"),
}


@pytest.mark.parametrize("case", list(BAD_TRACES))
def test_bad_decisions_are_refused_with_a_reason(case):
    decisions, fragment = BAD_TRACES[case]
    with pytest.raises(TraceProblem, match=fragment):
        _check(_trace(decisions))
    assert not trace_is_sound(_trace(decisions))


def _with_inst(index: int, inst: list) -> list:
    insts = copy.deepcopy(INSTS)
    insts[index] = inst
    return insts


BAD_INSTRUCTIONS = {
    "max_innermost_factor 0 (a re-sampling replay would loop forever)": (
        _with_inst(2, ["SamplePerfectTile", ["l1"], [4, 0], ["v4", "v5", "v6", "v7"]]),
        "max_innermost_factor=0",
    ),
    "a one-way tile": (_with_inst(2, ["SamplePerfectTile", ["l1"], [1, 64], ["v4"]]), "n=1"),
    "categorical weights all zero": (
        _with_inst(5, ["SampleCategorical", [], [[0, 16], [0, 0]], ["v13"]]),
        "probabilities",
    ),
    "categorical with fewer weights than candidates": (
        _with_inst(5, ["SampleCategorical", [], [[0, 16, 64], [0.5, 0.5]], ["v13"]]),
        "probabilities",
    ),
    "instruction that is not a 4-list": (_with_inst(1, ["GetLoops", ["b0"]]), "is not [kind, inputs, attrs, outputs]"),
    "output names that are not strings": (_with_inst(1, ["GetLoops", ["b0"], [], [1, 2]]), "non-strings"),
    "sampling after the postprocessors": (
        INSTS + [["SampleCategorical", [], [[1, 2], [0.5, 0.5]], ["v20"]]],
        "samples after EnterPostproc",
    ),
    "no instructions": ([], "not a non-empty list"),
}


@pytest.mark.parametrize("case", list(BAD_INSTRUCTIONS))
def test_bad_instructions_are_refused_with_a_reason(case):
    insts, fragment = BAD_INSTRUCTIONS[case]
    with pytest.raises(TraceProblem) as refused:
        parse_skeleton(insts)
    assert fragment in str(refused.value)


def test_tiles_against_the_loop_extent():
    skeleton = parse_skeleton(INSTS)
    tile = skeleton.samplers[2]
    assert tile_problem(tile, [2, 4, 1, 8], 64) is None
    assert "do not multiply to the loop extent 64" in tile_problem(tile, [2, 4, 1, 4], 64)
    assert tile_problem(tile, [-1, 1, 1, 1], None) is None  # TVM's decision for a loop without a constant extent
    assert "does not tile" in tile_problem(tile, [2, 4, 1, 8], None)
    assert "do not multiply" in tile_problem(tile, [-1, 1, 1, 1], 64)


@pytest.mark.parametrize(
    ("run_secs", "fragment"),
    [
        ([1e-4, 2e-4], None),
        ([1e9], None),  # failed: what this registry writes
        ([1e10], None),  # failed: what TVM's AddToDatabase writes
        ([], None),  # nothing measured: failed
        ([-1e-4], "is not a measurement"),
        ([0.0], "is not a measurement"),
        ([1e308], "is not a measurement"),
        ([math.inf], "is not a measurement"),
        ([math.nan], "is not a measurement"),
        ([MAX_RUN_SECS * 2], "is not a measurement"),
        ([1e-4, 1e10], "is not a measurement"),  # a failure stand-in among measurements is neither
        (["0.001"], "not a number"),
        ([True], "not a number"),
        ({"a": 1}, "is not a list"),
        ([1e-4] * 5000, "more than"),
    ],
)
def test_latencies(run_secs, fragment):
    problem = run_secs_problem(run_secs)
    assert (problem is None) if fragment is None else (fragment in problem), problem


def test_check_never_raises_on_odd_input():
    cache = SkeletonCache()
    for trace in (None, 5, "x", [], [1, 2], [[], []], [[None], []], [[["A", [], [], []]], [[0]]], {"a": 1}):
        record = testing.record(0, 0, testing.device())
        record = dataclasses.replace(record, trace=trace)
        [problem] = record_problems([record])
        assert isinstance(problem, Problem), trace
    with pytest.raises(TraceProblem):
        check_trace([[["GetSBlock", [], [], []]], [[0, 1]]], "k", cache)


def test_the_refusal_message_counts_and_names_the_first():
    refusals = Refusals()
    refusals.add("log.json:7", Problem("a decision for instruction 100001, but the trace has 36"))
    refusals.add("log.json:9", Problem("other"))
    assert refusals.message(120) == (
        "2 of 120 records do not apply to their workload "
        "(first: log.json:7, a decision for instruction 100001, but the trace has 36)"
    )
    refusals.add("log.json:10", Problem("latency -1 s is not a measurement", trace=False))
    assert refusals.message(120).startswith("3 of 120 records are invalid or do not apply to their workload")


def test_store_ingest_refuses_a_batch_with_one_invalid_record_and_writes_nothing(db_url):
    store = Store(db_url)
    dev = testing.device()
    store.ingest([testing.workload(0)], [testing.record(0, 0, dev)])
    before = rows_of(db_url)
    bad = testing.record(0, 2, dev)
    bad = dataclasses.replace(bad, trace=[bad.trace[0], bad.trace[1] + [[100001, 0]]])
    with pytest.raises(BadInputError, match=r"1 of 3 records do not apply to their workload \(first: record 2, "):
        store.ingest([testing.workload(1)], [testing.record(0, 1, dev), bad, testing.record(1, 0, dev)])
    negative = testing.record(0, 3, dev)
    negative = dataclasses.replace(negative, run_secs=(-1.0,))
    with pytest.raises(BadInputError, match="1 of 1 records are invalid"):
        store.ingest([], [negative])
    assert rows_of(db_url) == before


@pytest.mark.parametrize(
    "odd", [[[2, [2, 4, 1, 8]], [4, -1], [5, 3.0]], [[2, [2, 4, True, 8]], [4, -1], [5, 3]]], ids=["float", "bool"]
)
def test_a_remembered_verdict_is_not_handed_to_a_value_that_only_compares_equal(odd):
    """A skeleton remembers each (instruction, value) verdict; ``true`` and ``3.0`` equal ``1`` and ``3`` in Python,
    but they are not integer decisions, and the verdict an honest record earned must not pass them."""
    skeleton = parse_skeleton(copy.deepcopy(INSTS))
    assert read_decisions(skeleton, copy.deepcopy(DECISIONS))  # the honest record: verdicts remembered
    with pytest.raises(TraceProblem, match="not"):
        read_decisions(skeleton, odd)
