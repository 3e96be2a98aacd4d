"""Records validated against their workloads with real TVM: on import, on commit, and in isolated replay workers."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.errors import BadInputError
from registry.store.sql.store import Store
from registry.tvm_side import tvmlog
from tests.rows import rows_of

pytestmark = pytest.mark.tvm


def run(url: str, *args: str):
    return CliRunner().invoke(cli, ["--db", url, *args])


def _records(logs: Path) -> list[list]:
    return [json.loads(line) for line in (logs / tvmlog.RECORD_FILE).read_text().splitlines()]


def _write(logs: Path, records: list[list]) -> None:
    (logs / tvmlog.RECORD_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))


def _copy(tuned_logs, tmp_path: Path, edit) -> Path:
    """The tuned logs with ``edit(index, record)`` applied to every record (which it may change in place)."""
    logs = tmp_path / "edited"
    shutil.copytree(tuned_logs.work_dir, logs)
    records = _records(logs)
    for i, r in enumerate(records):
        edit(i, r)
    _write(logs, records)
    return logs


def _decisions(record: list) -> list:
    return record[1][0][1]


def _tile(record: list) -> list:
    """The first SamplePerfectTile decision of a record (the matmul's outer loop)."""
    insts, decisions = record[1][0]
    return next(d for d in decisions if insts[d[0]][0] == "SamplePerfectTile")


def _forged(i: int, r: list) -> None:
    """The audit's log: a decision past the last instruction on most records, latencies halved to rank first."""
    if i % 4:
        _decisions(r).append([100001, 0])
        r[1][1] = [s / 2 for s in r[1][1]]


def test_a_log_whose_decisions_point_nowhere_is_refused_whole(db_url, tuned_logs, tmp_path):
    logs = _copy(tuned_logs, tmp_path, _forged)
    n = len(_records(logs))
    Store(db_url).close()  # an empty registry, migrated
    before = rows_of(db_url)
    result = run(db_url, "import", str(logs))
    assert result.exit_code == 1, result.output
    [line] = result.stderr.splitlines()
    bad = sum(1 for i in range(n) if i % 4)
    assert line.startswith(f"Error: {bad} of {n} records do not apply to their workload (first: ")
    assert f"{tvmlog.RECORD_FILE}:2, a decision for instruction 100001, but the trace has" in line
    assert rows_of(db_url) == before

    skipped = run(db_url, "import", str(logs), "--skip-invalid")
    assert skipped.exit_code == 0, skipped.output
    assert f"records:   {n - bad} new" in skipped.stdout and f"skipped:   {bad} invalid (first: " in skipped.stdout


def test_later_commands_survive_a_refused_forged_log(sqlite_url, tuned_logs, tmp_path):
    """The audit saw `registry predictor train` segfault after the forged import: here it refuses the log, and the
    next import and a training run (each in a process of its own, where a crash would show) succeed."""
    logs = _copy(tuned_logs, tmp_path, _forged)
    exe = str(Path(sys.executable).with_name("registry"))
    for args, code in (
        (["import", str(logs)], 1),
        (["import", str(tuned_logs.work_dir)], 0),
        (["predictor", "train", "--holdout", "0"], 0),
    ):
        done = subprocess.run([exe, "--db", sqlite_url, *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == code, (args, done.stderr)


def _wrong_tile(i: int, r: list) -> None:
    if i == 3:
        tile = _tile(r)
        tile[1] = [tile[1][0] * 2, *tile[1][1:]]  # still positive integers, but twice the loop


def _categorical_past_candidates(i: int, r: list) -> None:
    if i == 5:
        insts = r[1][0][0]
        choice = next(d for d in _decisions(r) if insts[d[0]][0] == "SampleCategorical")
        choice[1] = len(insts[choice[0]][2][0])


def _unknown_instruction(i: int, r: list) -> None:
    if i == 0:
        r[1][0][0].insert(0, ["NoSuchInstruction", [], [], []])
        for d in _decisions(r):
            d[0] += 1


def _negative_latency(i: int, r: list) -> None:
    if i == 1:
        r[1][1] = [-1e-5]


def _failed_run(i: int, r: list) -> None:
    r[1][1] = [1e10]  # what TVM writes for a candidate that failed: kept, as a failed record


@pytest.mark.parametrize(
    ("edit", "line", "fragment"),
    [
        (_wrong_tile, 4, "do not multiply to the loop extent"),
        (_categorical_past_candidates, 6, "picks none of its"),
        (_unknown_instruction, 1, "the trace does not apply to its workload"),
        (_negative_latency, 2, "is not a measurement"),
    ],
)
def test_each_kind_of_invalid_record_is_named(sqlite_url, tuned_logs, tmp_path, edit, line, fragment):
    logs = _copy(tuned_logs, tmp_path, edit)
    result = run(sqlite_url, "import", str(logs))
    assert result.exit_code == 1, result.output
    [error] = result.stderr.splitlines()
    assert f"1 of {len(_records(logs))} records" in error and f"{tvmlog.RECORD_FILE}:{line}, " in error, error
    assert fragment in error, error


def test_failed_runs_import_as_failed_records(sqlite_url, tuned_logs, tmp_path):
    logs = _copy(tuned_logs, tmp_path, _failed_run)
    assert run(sqlite_url, "import", str(logs)).exit_code == 0
    stats = Store(sqlite_url).stats()
    assert stats.records == len(_records(logs)) and stats.records_ok == 0


def test_a_trace_that_crashes_tvm_costs_a_worker_not_the_caller(tuned_logs):
    """A zero tile size makes TVM divide by zero (SIGFPE): checked traces never get there (registry.store.validation
    refuses it), so it is sent to a worker directly here. The worker dies, its job says so, the next job runs."""
    from registry.records.replay_pool import Job, ReplayPool

    [workload] = tvmlog.read_workloads(tuned_logs.work_dir / tvmlog.WORKLOAD_FILE)
    good = _records(tuned_logs.work_dir)[0][1][0]
    crashing = copy.deepcopy(good)
    tile = next(d for d in crashing[1] if crashing[0][d[0]][0] == "SamplePerfectTile")
    tile[1] = [1, 0] + [1] * (len(tile[1]) - 3) + [tile[1][-1]]
    pool = ReplayPool(1)
    try:
        replies = pool.run([Job("w", workload.mod_json, crashing), Job("w", workload.mod_json, good, facts=True)])
    finally:
        pool.close()
    assert replies[0] == {"applies": False, "error": "replaying it crashed TVM (signal SIGFPE)"}
    assert replies[1]["applies"] and replies[1]["rewritten"] is None and replies[1]["dependent"] == []


def test_registry_database_refuses_records_that_do_not_replay(sqlite_url, tuned_logs):
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord
    from tvm.s_tir.schedule import Trace

    from registry.records.database import RegistryDatabase

    [good] = JSONDatabase(work_dir=str(tuned_logs.work_dir)).get_all_tuning_records()[:1]
    db = RegistryDatabase(tuned_logs.target, sqlite_url, num_threads=1)
    tile = next(i for i in good.trace.insts if i.kind.name == "SamplePerfectTile")
    extent_twice = [2 * int(x) if k == 0 else int(x) for k, x in enumerate(good.trace.decisions[tile])]
    forged = Trace(good.trace.insts, {**dict(good.trace.decisions.items()), tile: extent_twice})
    before = rows_of(sqlite_url)
    for trace, run_secs, fragment in ((forged, good.run_secs, "do not multiply"), (good.trace, [-1.0], "measurement")):
        record = TuningRecord(trace, good.workload, run_secs, good.target, good.args_info)
        # the call goes through TVM's FFI, which hands the BadInputError back as a RuntimeError with its message
        with pytest.raises((BadInputError, RuntimeError), match=fragment):
            db.commit_tuning_record(record)
    assert {t: r for t, r in rows_of(sqlite_url).items() if t == "tuning_record"} == {
        t: r for t, r in before.items() if t == "tuning_record"
    }
    db.commit_tuning_record(good)
    assert len(db) == 1


def _with_dependent_tile(record: list, inner: list[int]) -> list:
    """The record's trace with one more tile sampler, on the innermost loop of its first split: that loop's extent is
    the first sampler's last tile size, so it changes with the first sampler's decision."""
    trace = copy.deepcopy(record[1][0])
    insts, decisions = trace
    first = next(i for i, inst in enumerate(insts) if inst[0] == "SamplePerfectTile")
    split = insts[first + 1]
    assert split[0] == "Split", split
    at = first + 2
    insts.insert(at, ["SamplePerfectTile", [split[3][-1]], [2, 64], ["x_outer", "x_inner"]])
    trace[1] = [[i + (i >= at), v] for i, v in decisions] + [[at, inner]]
    return trace


def test_tiles_whose_extent_depends_on_other_decisions_are_replayed_one_by_one(tuned_logs):
    import tvm

    from registry.records.validator import RecordValidator
    from registry.store.rows import RecordIn
    from registry.tvm_side.replay import pristine, replay
    from registry.tvm_side.target import device_spec

    [workload] = tvmlog.read_workloads(tuned_logs.work_dir / tvmlog.WORKLOAD_FILE)
    records = _records(tuned_logs.work_dir)
    base = records[0]
    outer_last = _tile(base)[1][-1]  # the extent of the loop the new sampler tiles
    good = _with_dependent_tile(base, [1, outer_last])
    reply = replay(pristine(tvm.ir.load_json(workload.mod_json)), good, True)
    assert reply["applies"] and not reply["rewritten"], reply
    assert reply["dependent"] == [_tile(base)[0] + 2], reply  # found by the three replays, not assumed

    device = device_spec(base[1][2], 1, "cpu")
    wrong = _with_dependent_tile(base, [1, outer_last * 2])

    def record(trace):
        return RecordIn((workload.shash, "structural"), device, trace, tuple(base[1][1]), "imported", "test")

    validator = RecordValidator()
    # the first record of the key is its representative; the next two share its facts, whose extent for the new
    # sampler is not used (dependent): each is replayed, and only the wrong one is refused
    twin = _with_dependent_tile(base, [1, outer_last])
    twin[1][0][1] = list(reversed(twin[1][0][1]))  # other outer tiles: the inner loop's extent changes with them
    twin[1][-1][1] = [1, twin[1][0][1][-1]]
    problems = validator.validate(
        [(record(good), workload.mod_json), (record(twin), workload.mod_json), (record(wrong), workload.mod_json)]
    )
    assert problems[0] is None and problems[1] is None, problems
    assert problems[2] is not None and "TVM replays decision" in problems[2].reason, problems
