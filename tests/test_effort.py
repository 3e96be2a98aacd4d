"""Tuning together: leases divide tasks between runs on one registry, and each task's effort is recorded and used.

The store's leases on SQLite and PostgreSQL (a race of many takers, expiry, a lost lease); the plateau rule; and
real `registry tune` runs: effort recorded, plateaued tasks skipped, several models tuned as one, two processes at
once dividing a model's tasks, and a killed run's tasks taken over once its leases expire.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.cli.main import cli
from registry.pipeline.effort import Leases, plateaued, thinned
from registry.store.rows import DeviceSpec
from registry.store.sql.models import TaskEffort, TuningRecord
from registry.store.sql.store import Store
from registry.store.values import EffortUpdate
from registry.tvm_side import zoo

# -- the store's leases, no TVM --------------------------------------------------------------------------------------


def _device(store: Store) -> int:
    return store.add_device(DeviceSpec({"kind": "llvm", "mcpu": "test"}, 1, "Test CPU", "0.0"))


def test_a_lease_is_one_runs_until_it_is_released_or_expires(db_url):
    store = Store(db_url)
    device = _device(store)
    assert store.take_task(7, device, "a", 60) is None  # free: a takes it
    assert store.take_task(7, device, "a", 60) is None  # a renews it
    assert store.take_task(7, device, "b", 60) == "a"  # b is told who holds it
    assert (
        store.save_effort(EffortUpdate(7, device, "b", (4, 1.0), [(4, 10.0)], False, 60)) is False
    )  # b cannot write it
    assert store.save_effort(EffortUpdate(7, device, "a", (4, 2.5), [(0, 20.0), (4, 10.0)], False, 60)) is True
    assert (
        store.save_effort(EffortUpdate(7, device, "a", (4, 2.5), [(0, 20.0), (4, 10.0), (8, 9.0)], False, None)) is True
    )
    effort = store.efforts([7, 8], device)
    assert list(effort) == [7] and effort[7].trials == 8 and effort[7].seconds == pytest.approx(5.0)
    assert effort[7].curve == ((0, 20.0), (4, 10.0), (8, 9.0)) and effort[7].best_us == 9.0
    assert effort[7].holder is None and not effort[7].plateau  # released by the last save
    assert store.take_task(7, device, "b", -1) is None  # free again: b takes it, with a lease already expired
    assert store.take_task(7, device, "a", 60) is None  # so a may take it back
    assert store.save_effort(EffortUpdate(7, device, "b", (1, 0.1), [(9, 8.0)], True, 60)) is False  # b lost it
    assert store.renew_tasks("a", 60) == 1 and store.release_tasks("a") == 1 and store.release_tasks("a") == 0
    assert store.efforts([7], device)[7].trials == 8  # nothing written by the run that lost the lease


def test_of_many_runs_racing_for_a_task_exactly_one_takes_it(db_url):
    stores = [Store(db_url) for _ in range(8)]
    device = _device(stores[0])
    barrier = threading.Barrier(len(stores))
    results: dict[str, str | None] = {}

    def race(i: int) -> None:
        barrier.wait()
        results[f"run{i}"] = stores[i].take_task(1, device, f"run{i}", 60)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [name for name, other in results.items() if other is None]
    assert len(results) == 8 and len(winners) == 1, results
    assert all(other == winners[0] for name, other in results.items() if name != winners[0]), results


def test_a_run_that_lost_its_lease_stops_writing_effort_and_resumes_nothing(sqlite_url):
    store = Store(sqlite_url)
    device = _device(store)
    mine = Leases(store, device, window=4, lease_s=-1)  # every lease it takes has expired already
    theirs = Leases(store, device, window=4)
    assert mine.take(3, 100.0) is None and theirs.take(3, 100.0) is None  # expired: theirs took it over
    assert mine.after_batch(3, 4, 1.0, 90.0, exhausted=False, done=False) == (False, False)
    assert 3 not in mine.held
    assert theirs.after_batch(3, 4, 1.0, 80.0, exhausted=False, done=False) == (True, False)
    assert store.efforts([3], device)[3].curve == ((0, 100.0), (4, 80.0))


def test_a_plateau_is_under_one_percent_gained_over_the_last_window_of_trials():
    curve = [(0, 100.0), (16, 50.0), (32, 49.8), (48, 49.7)]
    assert plateaued(curve, window=32)  # 50.0 -> 49.7 over the last 32: 0.6%
    assert not plateaued(curve, window=48)  # 100 -> 49.7
    assert not plateaued(curve[:2], window=32)  # not yet 32 trials past a point
    assert not plateaued([], window=1)
    long = [(i, 100.0 - i / 1000) for i in range(1000)]
    kept = thinned(long, 256)
    assert len(kept) <= 256 and kept[-1] == long[-1] and kept[0] == long[0]
    assert [n for n, _ in kept] == sorted(n for n, _ in kept)


# -- real tuning runs --------------------------------------------------------------------------------------------------


def _tune(url: str, *args: str) -> dict:
    result = CliRunner().invoke(cli, ["--db", url, "tune", *args, "--no-predictor", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout[result.stdout.index("{") :])


def _forged_effort(bundle: Path, out: Path, field: int, value) -> Path:
    """``bundle`` with one field of every effort row replaced, and its checksum made to match (a forger's bundle)."""
    import hashlib
    import zipfile

    with zipfile.ZipFile(bundle) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    rows = [json.loads(line) for line in members["efforts.jsonl"].splitlines()]
    for row in rows:
        row[field] = value
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    manifest = json.loads(members["manifest.json"])
    manifest["members"]["efforts.jsonl"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    members["efforts.jsonl"], members["manifest.json"] = data, json.dumps(manifest).encode()
    with zipfile.ZipFile(out, "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return out


def _efforts(url: str) -> list[TaskEffort]:
    with Session(Store(url).engine) as s:
        return list(s.execute(select(TaskEffort).order_by(TaskEffort.workload_id)).scalars())


def _records_by_team(url: str) -> dict[int, set[str]]:
    with Store(url).read() as s:
        rows = s.execute(select(TuningRecord.workload_id, TuningRecord.team).distinct()).all()
    teams: dict[int, set[str]] = {}
    for wid, team in rows:
        teams.setdefault(wid, set()).add(team)
    return teams


@pytest.mark.tvm
def test_effort_is_recorded_travels_in_bundles_and_plateaued_tasks_are_skipped_unless_retune(sqlite_url, mlp, tmp_path):
    first = _tune(sqlite_url, str(mlp), "--trials", "16", "--batch", "4")
    efforts = _efforts(sqlite_url)
    assert len(efforts) == 2 and sum(e.trials for e in efforts) == first["tuning"]["trials"]["measured"] == 16
    for e, task in zip(efforts, sorted(first["tasks"], key=lambda t: t["workload_id"]), strict=True):
        curve = json.loads(e.curve_json)
        assert e.holder is None and e.seconds > 0 and curve[-1][0] == e.trials == task["measurements"]
        assert [us for _, us in curve] == sorted((us for _, us in curve), reverse=True)  # a best only improves
        assert curve[-1][1] == pytest.approx(task["after_us"], rel=1e-3)

    # the effort travels in a bundle, and lookup shows it
    bundle, copy = tmp_path / "effort.bundle", f"sqlite:///{tmp_path / 'copy.db'}"
    for args in (["--db", sqlite_url, "export", "--bundle", str(bundle)], ["--db", copy, "import", str(bundle)]):
        done = CliRunner().invoke(cli, args)
        assert done.exit_code == 0, done.output
    arrived = _efforts(copy)
    assert [(e.trials, e.curve_json, e.plateau) for e in arrived] == [
        (e.trials, e.curve_json, e.plateau) for e in efforts
    ]
    assert all(e.holder == "imported" for e in arrived)  # the sender's claim, not measured here (test_audit_effort)
    looked = CliRunner().invoke(cli, ["--db", copy, "lookup", "--json"])
    rows = json.loads(looked.stdout)["rows"]
    assert sorted(r["effort_trials"] for r in rows) == sorted(e.trials for e in efforts)
    # a forged effort row is one line, and nothing of the bundle is imported
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    for i, (field, value, says) in enumerate(
        [(4, [{"0": 1}], "curve is not a list"), (2, -5, "effort trials"), (5, "yes", "plateau"), (4, [[1, -3]], "µs")]
    ):
        forged = _forged_effort(bundle, tmp_path / f"forged{i}.bundle", field, value)
        done = CliRunner().invoke(cli, ["--db", fresh, "import", str(forged)])
        assert done.exit_code == 1 and says in done.stderr and done.stderr.count("\n") == 1, done.output
        with Store(fresh).read() as s:
            assert s.execute(select(func.count()).select_from(TuningRecord)).scalar() == 0

    store = Store(sqlite_url)
    device = efforts[0].device_id
    for e in efforts:  # both tasks declared plateaued, as a run whose last trials gained nothing would leave them
        assert store.take_task(e.workload_id, device, "test", 60) is None
        store.save_effort(EffortUpdate(e.workload_id, device, "test", (0, 0.0), json.loads(e.curve_json), True, None))
    skipped = _tune(sqlite_url, str(mlp), "--trials", "32", "--batch", "4")
    assert skipped["tuning"]["trials"]["measured"] == 0 and skipped["final_ms"] is not None
    assert all("plateaued" in t["stopped"] for t in skipped["tasks"]), skipped["tasks"]

    again = _tune(sqlite_url, str(mlp), "--trials", "24", "--batch", "4", "--retune")
    assert again["tuning"]["trials"]["measured"] == 8  # 24 asked, 16 stored
    assert sum(e.trials for e in _efforts(sqlite_url)) == 24


@pytest.mark.tvm
def test_several_models_are_tuned_as_one_each_shared_task_once(sqlite_url, tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(zoo.mlp(16, (128, 256, 128)), a)  # the first layer (16x128 @ 128x256 + relu) is in both
    onnx.save(zoo.mlp(16, (128, 256, 64)), b)
    listing = tmp_path / "models.txt"
    listing.write_text("# models with their input shapes\nb.onnx x=16,128\n")
    result = CliRunner().invoke(
        cli, ["--db", sqlite_url, "tune", str(a), "--models", str(listing), "--trials", "24", "--batch", "4",
              "--no-predictor", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout[result.stdout.index("{") :])["reports"]
    assert [r["model"] for r in reports] == ["a", "b"]
    ids = [{t["workload_id"] for t in r["tasks"]} for r in reports]
    shared = ids[0] & ids[1]
    assert len(shared) == 1 and len(ids[0] | ids[1]) == 3
    by_id = [{t["workload_id"]: t for t in r["tasks"]} for r in reports]
    [wid] = shared
    assert by_id[0][wid]["after_us"] == by_id[1][wid]["after_us"] and by_id[0][wid]["weight"] == 1
    assert reports[0]["tuning"]["trials"]["measured"] == 24  # one budget over the three tasks
    with Store(sqlite_url).read() as s:
        assert s.execute(select(func.count()).select_from(TuningRecord)).scalar() == 24
    assert all(r["final_ms"] < r["untuned_ms"] for r in reports)


def _registry(url: str, model: Path, team: str, *args: str) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("registry")
    cmd = [str(exe), "--db", url, "tune", str(model), "--team", team, "--no-predictor", "--batch", "4", "--json", *args]
    env = {**os.environ, "TVM_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _ended_early(report: dict) -> bool:
    """Whether a run ended short of its trial budget because every task stopped for what its tuning found (the
    planner's gain and share rules, a plateau, nothing left to propose), not for a failure or a lost lease."""
    natural = ("gain below", "plateaued", "search space exhausted")
    reasons = [t.get("stopped") or "" for t in report["tasks"]]
    return report["tuning"]["stop"] == "every task stopped" and all(
        r.startswith(natural) or "of the model's latency" in r for r in reasons
    )


def _report(proc: subprocess.Popen) -> dict:
    """The run's JSON report, with the end of what it wrote to stderr (its warnings) under ``"stderr"``."""
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return {**json.loads(out[out.index("{") :]), "stderr": err[-3000:]}


@pytest.mark.tvm
def test_two_runs_at_once_divide_a_models_tasks_and_its_budget(db_url, mlp):
    runs = [_registry(db_url, mlp, team, "--trials", "16", "--lease", "2m") for team in ("one", "two")]
    reports = [_report(p) for p in runs]
    teams = _records_by_team(db_url)
    assert len(teams) == 2, teams  # both tasks tuned
    # No task tuned by both at once: a task's records by one run all come before the other's. A run releases a
    # task it stopped at once (docs/ARCHITECTURE.md), and the other may take it up afterwards, so both can appear.
    with Store(db_url).read() as s:
        rows = s.execute(select(TuningRecord.workload_id, TuningRecord.team, TuningRecord.created_at)).all()
    for wid, names in teams.items():
        spans = sorted(
            (min(c for w, t, c in rows if w == wid and t == n), max(c for w, t, c in rows if w == wid and t == n))
            for n in names
        )
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), (wid, spans)
    measured = [r["tuning"]["trials"]["measured"] for r in reports]
    with Store(db_url).read() as s:
        stored = s.execute(select(func.count()).select_from(TuningRecord)).scalar()
    # Each run stops when the records of both count 16 (a batch each may have been under way then), or earlier when
    # every task stopped (the planner's gain rule).
    assert sum(measured) == stored and stored <= 16 + 2 * 4, measured
    assert stored >= 16 or all(_ended_early(r) for r in reports), [r["tasks"] for r in reports]
    assert all(e.holder is None for e in _efforts(db_url))  # every lease released at the end


@pytest.mark.tvm
def test_a_killed_runs_tasks_are_taken_over_once_its_leases_expire(sqlite_url, mlp):
    # a lease longer than the next run takes to start (import, extract, time the defaults): it must wait for it
    killed = _registry(sqlite_url, mlp, "killed", "--trials", "24", "--lease", "25s")
    store = Store(sqlite_url)
    deadline = time.monotonic() + 300
    while not any(e.trials for e in _efforts(sqlite_url)):  # until it has recorded a batch
        assert killed.poll() is None and time.monotonic() < deadline, "the run ended before its first batch"
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    held = [e for e in _efforts(sqlite_url) if e.holder is not None]
    assert held  # its leases outlive it
    with store.read() as s:
        before = s.execute(select(func.count()).select_from(TuningRecord)).scalar()

    report = _report(_registry(sqlite_url, mlp, "after", "--trials", "24", "--lease", "4s"))
    with store.read() as s:
        n = s.execute(select(func.count()).select_from(TuningRecord)).scalar()
        distinct = s.execute(select(func.count(func.distinct(TuningRecord.trace_hash)))).scalar()
    # None lost, none twice: every trial measured is stored once. The budget is a ceiling: a run also ends when every
    # task stopped (the planner's gain rule stops a task that gained little for three batches), short of it.
    assert n == distinct and report["tuning"]["trials"]["measured"] == n - before, report["stderr"]
    assert n == 24 or (n < 24 and _ended_early(report)), report["tasks"]
    assert report["tuning"]["waited_s"] > 0  # it waited for the dead run's leases to expire, then took them over
    assert all(e.holder is None for e in _efforts(sqlite_url))


@pytest.mark.parametrize(
    ("listing", "args", "fragment"),
    [
        ("missing.onnx\n", [], "models.txt:1: no model file"),
        ("# nothing\n\n", [], "names no model"),
        ("a.onnx 1,128\n", [], "models.txt:1: '1,128' is not an input shape"),
        ("a.onnx\na.onnx\n", ["-o", "out.so"], "-o/--output applies to one model; 2 models were given"),
        ("a.onnx\na.onnx\n", ["--name", "x"], "--name applies to one model"),
    ],
)
def test_bad_model_lists_give_one_line(sqlite_url, tmp_path, listing, args, fragment):
    onnx.save(zoo.mlp(16, (128, 64)), tmp_path / "a.onnx")
    (tmp_path / "models.txt").write_text(listing)
    out = tmp_path / "out.so"
    args = [str(out) if a == "out.so" else a for a in args]
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "tune", "--models", str(tmp_path / "models.txt"), *args])
    assert result.exit_code == 1 and fragment in result.stderr, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


def test_tune_without_a_model_says_how_to_name_one(sqlite_url):
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "tune", "--trials", "4"])
    assert result.exit_code == 1 and "name a model to tune" in result.stderr, result.output
