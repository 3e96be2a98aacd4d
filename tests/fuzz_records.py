"""The record fuzzer, run by tests/test_fuzz_records.py in a process of its own (a crash must fail a test, not end the
test run): ``python tests/fuzz_records.py LOGS EXAMPLES SEED``.

Hypothesis mutates real records of the logs in LOGS (decisions, decision indices, instructions, latencies, the
target) and each goes the way ``registry import`` takes a record: the target through ``canonical_target``, then
``RecordValidator``. The property: the check never raises, and a record it accepts replays *in this process*, exactly
(TVM keeps every decision), so that no later reader of the registry can be hurt by it. Prints counts as JSON.
"""

from __future__ import annotations

import copy
import json
import math
import sys
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from registry import hostinfo
from registry.errors import BadInputError
from registry.store.rows import DeviceSpec, RecordIn
from registry.store.validation import Problem
from registry.tvm_side import tvmlog

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-3, 300)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
INDEX = st.one_of(st.integers(-3, 60), st.sampled_from([100001, 2**31, 2**32, -(2**31), 2**63]), st.booleans())
KINDS = ["SamplePerfectTile", "SampleCategorical", "SampleComputeLocation", "Split", "Fuse", "GetLoops", "Nope"]


def _decision(data, trace) -> list | None:
    return data.draw(st.sampled_from(trace[1])) if trace[1] else None


def m_index(data, trace, record) -> None:
    d = _decision(data, trace)
    if d is not None:
        d[0] = data.draw(INDEX)


def m_value(data, trace, record) -> None:
    d = _decision(data, trace)
    if d is not None:
        d[1] = data.draw(st.one_of(JSON, st.lists(st.integers(-2, 2**33), max_size=6), st.integers(-5, 2**33)))


def m_tile(data, trace, record) -> None:
    """Tile sizes changed the ways that look plausible: permuted (often still perfect), scaled, zeroed."""
    tiles = [d for d in trace[1] if isinstance(d[1], list) and d[1] and all(type(x) is int for x in d[1])]
    if not tiles:
        return
    d = data.draw(st.sampled_from(tiles))
    how = data.draw(st.sampled_from(["permute", "scale", "zero", "negative", "swap"]))
    i = data.draw(st.integers(0, len(d[1]) - 1))
    if how == "permute":
        d[1] = data.draw(st.permutations(d[1]))
    elif how == "scale":
        d[1][i] *= data.draw(st.sampled_from([2, 3, 7, 1024]))
    elif how in ("zero", "negative"):
        d[1][i] = 0 if how == "zero" else -d[1][i]
    else:
        j = data.draw(st.integers(0, len(d[1]) - 1))
        d[1][i], d[1][j] = d[1][j] * 2, max(1, d[1][i] // 2)


def m_categorical(data, trace, record) -> None:
    ints = [d for d in trace[1] if isinstance(d[1], int)]
    if ints:
        data.draw(st.sampled_from(ints))[1] = data.draw(st.integers(-3, 10) | st.sampled_from([2**31, 2**32]))


def m_add(data, trace, record) -> None:
    trace[1].append([data.draw(INDEX), data.draw(JSON)])


def m_drop(data, trace, record) -> None:
    if trace[1]:
        trace[1].pop(data.draw(st.integers(0, len(trace[1]) - 1)))


def m_instruction(data, trace, record) -> None:
    inst = data.draw(st.sampled_from(trace[0]))
    part = data.draw(st.integers(0, 3))
    if part == 0:
        inst[0] = data.draw(st.sampled_from(KINDS) | st.text(max_size=12))
    elif inst[part]:
        inst[part][data.draw(st.integers(0, len(inst[part]) - 1))] = data.draw(JSON | st.sampled_from(["l1", "b0"]))
    else:
        inst[part] = data.draw(st.lists(JSON, max_size=3))


def m_reorder(data, trace, record) -> None:
    i, j = data.draw(st.integers(0, len(trace[0]) - 1)), data.draw(st.integers(0, len(trace[0]) - 1))
    trace[0][i], trace[0][j] = trace[0][j], trace[0][i]


def m_latency(data, trace, record) -> None:
    record[1] = data.draw(
        st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 2**40) | JSON, max_size=4) | JSON
    )


def m_target(data, trace, record) -> None:
    key = data.draw(st.sampled_from(["kind", "mcpu", "mtriple", "num-cores", "keys", "tag", "max_num_threads"]))
    record[2][key] = data.draw(JSON | st.sampled_from(["llvm", "cuda", "znver4", "skylake", "no-cpu", 0, -1, 2]))


def m_none(data, trace, record) -> None:
    """Unchanged: the control, a valid record must pass."""


MUTATIONS = [m_index, m_value, m_tile, m_tile, m_categorical, m_add, m_drop, m_instruction, m_reorder]
MUTATIONS += [m_latency, m_target, m_none]


def main(logs: Path, examples: int, fuzz_seed: int) -> None:
    import tvm

    from registry.records.validator import RecordValidator
    from registry.tvm_side.apply_trace import as_stored
    from registry.tvm_side.signature import plain_json
    from registry.tvm_side.target import canonical_target

    workloads = tvmlog.read_workloads(logs / tvmlog.WORKLOAD_FILE)
    modules = [tvm.ir.load_json(w.mod_json) for w in workloads]
    records = [json.loads(line) for line in (logs / tvmlog.RECORD_FILE).read_text().splitlines() if line.strip()]
    validator = RecordValidator()
    counts: Counter = Counter()

    @seed(fuzz_seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def fuzz(data) -> None:
        index, body = copy.deepcopy(data.draw(st.sampled_from(records)))
        trace = body[0]  # body: [trace, run_secs, target, args_info], mutated in place
        mutations = data.draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3))
        for mutate in mutations:
            mutate(data, trace, body)
        counts["examples"] += 1
        try:
            canon = canonical_target(body[2])
        except BadInputError:
            counts["target refused"] += 1
            return
        run_secs = body[1]
        run_secs = tuple(run_secs) if isinstance(run_secs, list) else run_secs
        device = DeviceSpec(canon, 1, "fuzz", hostinfo.tvm_version())
        record = RecordIn(
            workload=(workloads[index].shash, "structural"),
            device=device,
            trace=trace,
            run_secs=run_secs,
            source="imported",
            tool_version="fuzz",
        )
        [problem] = validator.validate([(record, workloads[index].mod_json)])
        assert problem is None or isinstance(problem, Problem), problem
        if problem is not None:
            counts["refused"] += 1
            return
        counts["accepted"] += 1
        assert all(isinstance(s, (int, float)) and math.isfinite(s) for s in run_secs), run_secs
        sch = as_stored(modules[index], trace)  # in this process: an accepted record must be safe to replay
        assert sch is not None, "accepted, but does not replay"
        assert plain_json(sch.trace.as_json())[1] == trace[1], "accepted, but TVM rewrote its decisions"
        if trace[1] != records[index][1][0][1]:
            counts["accepted with other decisions"] += 1

    fuzz()
    print(json.dumps(dict(counts)))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
