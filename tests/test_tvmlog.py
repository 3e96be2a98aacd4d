"""Reading TVM's log format: the record reader that skips parsing an instruction list it has seen gives exactly what
parsing each line whole gives, and refuses what that refuses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest

from registry.errors import BadInputError
from registry.store.rows import canonical_json
from registry.tvm_side import tvmlog
from tests.shared_data import H100_LOG

TARGET = {"kind": "llvm", "keys": ["cpu"], "mcpu": "znver4", "num-cores": 2, "tag": ""}
ARGS = [["TENSOR", "float32", [16, 64]], ["TENSOR", "float32", [64, 64]]]


def _insts(variant: int) -> list:
    """A made-up instruction list (the reader knows nothing of TVM's semantics): a tile sampler, a categorical with
    float weights as TVM writes them, and ``variant`` in an annotation, so lists differ."""
    return [
        ["GetSBlock", [], ["matmul", "main"], ["b0"]],
        ["GetLoops", ["b0"], [], ["l1", "l2"]],
        ["SamplePerfectTile", ["l1"], [2, 64], ["v3", "v4"]],
        ["SampleCategorical", [], [[0, 16, 64], [0.33333333333333331483, 0.5, 0.16666666666666665741]], ["v5"]],
        ["Annotate", ["b0", "v5"], [f'"unroll_{variant}"'], []],
    ]


def _line(index: int, insts: list, decisions: list, secs: list, compact: bool = True) -> str:
    entry = [index, [[insts, decisions], secs, TARGET, ARGS]]
    return json.dumps(entry, separators=(",", ":") if compact else (", ", ": "))


def _log(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / tvmlog.RECORD_FILE
    path.write_text("\n".join(lines) + "\n")
    return path


def _whole(path: Path) -> list:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _as_entries(records: list[tvmlog.RawRecord]) -> list:
    return [[r.workload_index, [r.trace, list(r.run_secs), r.target, r.args_info]] for r in records]


def test_records_with_a_known_instruction_list_read_as_parsing_each_line_whole(tmp_path):
    lines = [
        _line(i % 2, _insts(i % 3), [[2, [4 * (i + 1), 16]], [3, i % 3]], [1e-5 * (1 + i), 2.5e-5]) for i in range(12)
    ]
    lines.insert(5, _line(1, _insts(0), [[2, [8, 8]], [3, 2]], [3e-5], compact=False))  # whitespace: read whole
    path = _log(tmp_path, lines)
    records = list(tvmlog.read_records(path))
    assert _as_entries(records) == _whole(path)
    known = [r for r in records if r.insts_json is not None]
    # each (workload, list) pair is parsed whole the first time it is seen, and the spaced line every time
    assert len(known) == len(records) - len({(i % 2, i % 3) for i in range(12)}) - 1
    assert all(r.insts_json == canonical_json(r.trace[0]) for r in known)
    assert [r.where for r in records] == [f"{path}:{n}" for n in range(1, len(lines) + 1)]


@pytest.mark.parametrize(
    "bad, says",
    [
        (lambda line: line[: len(line) - 20], "not valid JSON"),  # truncated inside the target
        (lambda line: line + "]", "not valid JSON"),  # one bracket too many
        (lambda line: line[:-2] + ',"more"]]', "expected [workload_index"),  # a fifth member
        (lambda line: "[0" + line[1:], "not valid JSON"),  # an index with a leading zero
        (lambda line: line.replace(json.dumps(TARGET, separators=(",", ":")), '"llvm"'), "expected [workload_index"),
    ],
)
def test_a_bad_line_after_a_known_instruction_list_is_refused_as_a_whole_parse_refuses_it(tmp_path, bad, says):
    good = _line(3, _insts(1), [[2, [4, 16]], [3, 1]], [1e-5])
    path = _log(tmp_path, [good, good, bad(good)])
    with pytest.raises(BadInputError, match=re.escape(f"{tvmlog.RECORD_FILE}:3: {says}")):
        list(tvmlog.read_records(path))


@pytest.mark.skipif(not H100_LOG.exists(), reason=f"{H100_LOG} (the shared CUDA log) is not here")
def test_a_log_tvm_wrote_reads_as_parsing_each_line_whole():
    """TVM writes floats with 20 significant digits, which no serializer here writes back the same."""
    path = H100_LOG / tvmlog.RECORD_FILE
    records = list(tvmlog.read_records(path))
    assert _as_entries(records) == _whole(path)
    # 46 of its 261 records repeat an instruction list that an earlier record of their workload had: those are read
    # from their decisions on, each with the list it repeats
    seen: dict[int, set[str]] = {}
    for r in records:
        assert r.insts_json is None or r.insts_json in seen.get(r.workload_index, set()), r.where
        seen.setdefault(r.workload_index, set()).add(canonical_json(r.trace[0]))
    assert (len(records), sum(r.insts_json is not None for r in records)) == (261, 46)
