"""An outside audit of effort claims, leases and crafted rows of ``task_effort``.

- An effort is a claim: checked like a record (seconds against trials, the curve against the total and itself), and
  one another registry sent never stops `registry tune` of a task (a writer pushed "2^31-1 trials, plateaued" for a
  model's tasks, and every later tune of it measured nothing).
- An export leaves out an effort row that fails those checks, with a warning: one corrupt row blocked every pull.
- Crafted rows (a lease time that is not a date, trials that are text, negative seconds) cost a warning, never a
  crash of `tune`, `report` or `export --bundle`.
- `--lease` is bounded (99999999999h raised OverflowError), a stored lease past the bound counts as expired (a
  crafted year-9999 lease on every task made tune wait for ever), and `registry db release-leases` frees the leases
  of runs that have ended.

Each test here failed before its fix (checked by running it on the code before it).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from sqlalchemy import select, text

from registry import hostinfo, testing
from registry.cli.main import cli
from registry.errors import BadInputError, RegistryWarning
from registry.pipeline.effort import Leases
from registry.store.rows import ModelIn
from registry.store.sql.efforts import IMPORTED
from registry.store.sql.models import TaskEffort
from registry.store.sql.store import Store
from registry.store.validation import MAX_WEIGHT, effort_problem
from registry.store.values import EffortUpdate
from registry.tvm_side import zoo
from tests.test_effort import _forged_effort, _registry

# -- the claim's checks, no database -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "trials, seconds, curve, says",
    [
        (MAX_WEIGHT, 0.0, [], "faster than a trial"),  # the audit's: every trial there is in no time
        (100, 50.0, [[0, 9.0], [400, 8.0]], "up to the effort's 100"),  # a point past the total
        (100, 50.0, [[0, 9.0], [50, 8.0], [40, 7.0]], "trials only rise"),
        (100, 50.0, [[0, 9.0], [50, 8.0], [90, 12.0]], "a best never"),  # a best that got worse
        (100, 50.0, [[0, 9.0], [50, 1e-6]], "µs from"),  # a picosecond kernel
    ],
)
def test_an_effort_claim_is_checked_like_a_record(trials, seconds, curve, says):
    """Each of these passed the old check (counts and positive µs only)."""
    problem = effort_problem(trials, seconds, curve, True)
    assert problem is not None and says in problem, problem
    assert effort_problem(100, 50.0, [[0, 9.0], [50, 8.0], [100, 8.0]], True) is None  # an honest one passes


# -- the store: stored leases and rows, SQLite and PostgreSQL ------------------------------------------------------


def _workloads(url: str, n: int) -> tuple[Store, list[int], int]:
    """A registry holding ``n`` synthetic workloads with a record each: (store, workload ids, device id)."""
    store = Store(url)
    dev = testing.device()
    store.ingest([testing.workload(i) for i in range(n)], [testing.record(i, 0, dev) for i in range(n)])
    with store.read() as s:
        ids = list(s.execute(text("SELECT id FROM workload ORDER BY id")).scalars())
    return store, ids, store.add_device(dev)


def _sql(store: Store, statement: str, **params) -> None:
    store.transact(lambda conn: conn.execute(text(statement), params))


def test_a_stored_lease_past_the_bound_counts_as_expired(db_url):
    """A lease until 9999 (crafted, or left by a version without the bound) and a holder without a lease time
    were taken as held for ever: `take_task` answered the ghost's name, and a run waited on it without end."""
    store, (a, b, c), device = _workloads(db_url, 3)
    for wid in (a, b, c):
        assert store.take_task(wid, device, "ghost:1:x", 60) is None
    _sql(store, "UPDATE task_effort SET lease_until = :t WHERE workload_id = :w", t="9999-12-31 00:00:00", w=a)
    _sql(store, "UPDATE task_effort SET lease_until = NULL WHERE workload_id = :w", w=b)
    with pytest.warns(RegistryWarning, match="counted as expired"):
        found = store.efforts([a, b, c], device)
    assert found[a].holder is None and found[b].holder is None and found[c].holder == "ghost:1:x"
    assert store.take_task(a, device, "me", 60) is None and store.take_task(b, device, "me", 60) is None
    assert store.take_task(c, device, "me", 60) == "ghost:1:x"  # a lease within the bound still holds


def test_a_crafted_effort_row_is_ignored_and_started_afresh_by_the_run_that_takes_it(db_url):
    """An effort of 5,000 trials in no time was read as measured, and tune skipped its task as plateaued."""
    store, (wid,), device = _workloads(db_url, 1)
    assert store.take_task(wid, device, "someone:1:x", 60) is None
    _sql(store, "UPDATE task_effort SET trials = 5000, seconds = 0, plateau = :p, holder = NULL", p=True)
    with pytest.warns(RegistryWarning, match="faster than a trial"):
        assert store.efforts([wid], device) == {}
    leases = Leases(store, device)
    assert leases.take(wid, 50.0) is None and leases.held[wid].trials == 0  # the row was started afresh
    assert leases.after_batch(wid, 4, 1.0, 40.0, exhausted=False, done=True) == (True, False)
    assert (store.efforts([wid], device)[wid].trials, store.efforts([wid], device)[wid].curve) == (
        4,
        ((0, 50.0), (4, 40.0)),
    )


def test_an_imported_effort_is_read_by_tune_as_none_and_replaced_by_the_first_run(db_url):
    """A sent effort was stored as this registry's own: its plateau stopped tune and its trials spent the budget."""
    from registry.store.rows import IngestExtras
    from registry.store.sql.exchange import write_extras

    store, (wid,), device = _workloads(db_url, 1)
    ident = (testing.shash(0), "structural")
    claim = (ident, testing.device().key, 100_000, 1e6, ((0, 9.0), (100_000, 9.0)), True)
    store.transact(lambda conn: write_extras(conn, IngestExtras(local={ident: ident}, efforts=[claim]), {ident: wid}))
    stored = store.efforts([wid], device)[wid]
    assert stored.holder == IMPORTED and stored.trials == 100_000 and stored.plateau  # kept, as the sender's claim
    leases = Leases(store, device)
    assert leases.read([wid])[wid].trials == 0 and not leases.read([wid])[wid].plateau
    assert leases.take(wid, 20.0) is None
    leases.after_batch(wid, 4, 1.0, 15.0, exhausted=False, done=True)
    mine = store.efforts([wid], device)[wid]
    assert (mine.holder, mine.trials, mine.curve) == (None, 4, ((0, 20.0), (4, 15.0)))
    store.transact(lambda conn: write_extras(conn, IngestExtras(local={ident: ident}, efforts=[claim]), {ident: wid}))
    assert store.efforts([wid], device)[wid].trials == 4  # a later claim never replaces what was measured here


def test_release_leases_frees_those_of_ended_runs_and_leaves_the_running(db_url, tmp_path):
    """`registry db release-leases` did not exist: a killed run's leases could only wait out their time."""
    store, ids, device = _workloads(db_url, 5)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = hostinfo.hostname()[:120]
    holders = [
        f"{host}:{ended.stdout.strip()}:aa",  # a process of this host that has ended
        f"{host}:{os.getpid()}:bb",  # this one: running
        "another-host.example:1234:cc",  # cannot be checked from here
        "expired:1:dd",
        "far:1:ee",
    ]
    for wid, holder in zip(ids, holders, strict=True):
        assert store.take_task(wid, device, holder, 600) is None
    _sql(store, "UPDATE task_effort SET lease_until = :t WHERE holder = 'expired:1:dd'", t="2000-01-01 00:00:00")
    _sql(store, "UPDATE task_effort SET lease_until = :t WHERE holder = 'far:1:ee'", t="9999-01-01 00:00:00")
    store.save_model(ModelIn("m", "0" * 64, {"x": [1]}, [(testing.workload(0), "t0", 1)]))

    def run(*args: str):
        return CliRunner().invoke(cli, ["--db", db_url, "db", "release-leases", *args])

    missing = run("--model", "nope")
    assert missing.exit_code == 1 and missing.stderr.count("\n") == 1 and "nope" in missing.stderr, missing.output
    done = run()
    assert done.exit_code == 0 and "released 3 lease(s)" in done.stdout and "left 2" in done.stdout, done.output
    with store.read() as s:
        held = set(s.execute(select(TaskEffort.holder).where(TaskEffort.holder.is_not(None))).scalars())
    assert held == set(holders[1:3])
    assert "released 0" in run("--model", "m", "--force").stdout  # model m's one task was the ended run's
    assert "released 2" in run("--force").stdout and "released 0" in run().stdout


# -- the command line ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lease", ["99999999999h", "25h"])
def test_a_lease_past_a_day_is_refused_in_one_line(sqlite_url, mlp, lease):
    """99999999999h raised OverflowError mid-run, and 1000000h was taken (leases until 2140 when the run died)."""
    done = CliRunner().invoke(cli, ["--db", sqlite_url, "tune", str(mlp), "--lease", lease, "--trials", "1"])
    assert done.exit_code == 2 and "--lease" in done.stderr and done.stderr.count("\n") == 1, done.output
    from registry import api

    with pytest.raises(BadInputError, match="lease"):
        api.tune_models([api.ModelSpec(mlp, [], None, None)], db=sqlite_url, lease=1e15)


def _tune(url: str, model: Path, *args: str) -> dict:
    result = CliRunner().invoke(
        cli, ["--db", url, "tune", str(model), *args, "--batch", "4", "--no-predictor", "--json"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout[result.stdout.index("{") :])


@pytest.mark.tvm
def test_an_imported_plateau_does_not_stop_tuning_and_an_impossible_one_is_refused(sqlite_url, db_url, mlp, tmp_path):
    """A pushed or pulled "plateaued" effort made every later tune of the model skip its tasks (0 measured), and
    2^31-1 trials in 0 s were imported as they came."""
    first = _tune(sqlite_url, mlp, "--trials", "8")
    bundle = tmp_path / "tuned.bundle"
    assert CliRunner().invoke(cli, ["--db", sqlite_url, "export", "--bundle", str(bundle)]).exit_code == 0
    impossible = _forged_effort(_forged_effort(bundle, tmp_path / "i1", 2, MAX_WEIGHT), tmp_path / "i2", 3, 0.0)
    refused = CliRunner().invoke(cli, ["--db", db_url, "import", str(impossible)])
    assert refused.exit_code == 1 and "faster than a trial" in refused.stderr, refused.output
    # a claim that passes the checks: 100,000 trials in a day and a half, flat, plateaued
    claim = bundle
    for i, (field, value) in enumerate([(2, 100_000), (3, 1.3e5), (4, [[0, 50.0], [100_000, 50.0]]), (5, True)]):
        claim = _forged_effort(claim, tmp_path / f"claim{i}.bundle", field, value)
    imported = CliRunner().invoke(cli, ["--db", db_url, "import", str(claim)])
    assert imported.exit_code == 0, imported.output
    stored = first["tuning"]["trials"]["measured"]
    again = _tune(db_url, mlp, "--trials", str(stored + 8))
    assert again["tuning"]["trials"]["measured"] > 0, again["tasks"]
    assert not any("plateaued" in (t["stopped"] or "") for t in again["tasks"]), again["tasks"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, tuned_logs) -> tuple[Path, Path]:
    """A registry of the tiny model's records (plain TVM's, imported) and one `registry tune` run's effort on its
    task, and that model as an ONNX file."""
    folder = tmp_path_factory.mktemp("audit_effort")
    db, model = folder / "base.db", folder / "tiny.onnx"
    done = CliRunner().invoke(cli, ["--db", str(db), "import", str(tuned_logs.work_dir)])
    assert done.exit_code == 0, done.output
    onnx.save(zoo.mlp(8, (64, 64)), model)
    _tune(str(db), model, "--trials", "4", "--name", "tiny")
    return db, model


def _one_line_at_most(result, what: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (what, result.exception)
    assert result.exit_code == 0 and "Traceback" not in result.output, (what, result.output)


CRAFTED = {
    "a lease time that is not a date": "UPDATE task_effort SET holder = 'x:1:y', lease_until = 'not a date'",
    "trials that are text": "UPDATE task_effort SET trials = 'many'",
    "negative seconds": "UPDATE task_effort SET seconds = -5",
}


@pytest.mark.tvm
@pytest.mark.parametrize("name", list(CRAFTED))
def test_a_crafted_effort_row_costs_a_warning_never_a_crash(name, tuned, tmp_path):
    """Each crashed `tune` (ValueError of the date, TypeError of the text, a raw CHECK error), and the date also
    `report` and `export --bundle`."""
    db = tmp_path / "crafted.db"
    db.write_bytes(tuned[0].read_bytes())
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")  # as a hand with the file may write it
        conn.execute(CRAFTED[name])
    runner = CliRunner()
    said = ""
    for args in (
        ["tune", str(tuned[1]), "--name", "tiny", "--trials", "12", "--batch", "4", "--no-predictor"],
        ["report", "tiny", "-o", str(tmp_path / "report.html")],
        ["export", "--bundle", str(tmp_path / "out.bundle")],
    ):
        result = runner.invoke(cli, ["--db", str(db), *args])
        _one_line_at_most(result, args[0])
        said += result.stderr
    assert "task effort row(s) not used as stored" in said, said


@pytest.mark.tvm
def test_an_export_leaves_out_a_corrupt_effort_row_so_pulls_go_on(db_url, tuned_logs, tmp_path):
    """The row was exported, and every importer refused the whole bundle (or page of a pull) for it."""
    done = CliRunner().invoke(cli, ["--db", db_url, "import", str(tuned_logs.work_dir)])
    assert done.exit_code == 0, done.output
    store = Store(db_url)
    with store.read() as s:
        (wid, did), *others = s.execute(text("SELECT DISTINCT workload_id, device_id FROM tuning_record")).all()
    for w, d in others:  # honest effort on the others
        assert store.take_task(w, d, "run:1:a", 60) is None
        assert store.save_effort(EffortUpdate(w, d, "run:1:a", (4, 2.0), [(0, 9.0), (4, 8.0)], False, None))
    assert store.take_task(wid, did, "run:1:a", 60) is None
    _sql(store, "UPDATE task_effort SET trials = 5000, seconds = 0, holder = NULL WHERE workload_id = :w", w=wid)
    bundle, copy = tmp_path / "out.bundle", f"sqlite:///{tmp_path / 'copy.db'}"
    exported = CliRunner().invoke(cli, ["--db", db_url, "export", "--bundle", str(bundle)])
    assert exported.exit_code == 0 and "faster than a trial" in exported.stderr, exported.output
    imported = CliRunner().invoke(cli, ["--db", copy, "import", str(bundle)])
    assert imported.exit_code == 0, imported.output
    with Store(copy).read() as s:
        arrived = s.execute(select(TaskEffort.trials, TaskEffort.holder)).all()
    assert sorted(arrived) == [(4, IMPORTED)] * len(others)


def test_warnings_are_not_repeated_by_one_run(sqlite_url):
    """A run reads every task's effort after each batch: a crafted row warned once per batch."""
    store, (wid,), device = _workloads(sqlite_url, 1)
    assert store.take_task(wid, device, "someone:1:x", 60) is None
    _sql(store, "UPDATE task_effort SET trials = 5000, holder = NULL")
    leases = Leases(store, device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            leases.read([wid])
    # Only the registry's own warnings count: a ResourceWarning of an earlier test's connection, collected inside the
    # block, is not this run's (it failed CI once).
    ours = [str(w.message) for w in caught if issubclass(w.category, RegistryWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]


@pytest.mark.tvm
def test_a_crafted_lease_until_9999_on_every_task_does_not_make_tune_wait(tuned, tmp_path):
    """Every task leased until 9999 to a run that is gone: tune waited for them without end (here: past the
    deadline). Now the leases count as expired, with a warning, and it tunes."""
    db = tmp_path / "leased.db"
    db.write_bytes(tuned[0].read_bytes())
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE task_effort SET holder = 'ghost:1:x', lease_until = '9999-12-31 00:00:00.000000'")
    proc = _registry(f"sqlite:///{db}", tuned[1], "after", "--trials", "12", "--name", "tiny")
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("tune still waited on the crafted leases after 300 s")
    assert proc.returncode == 0, err[-3000:]
    assert "counted as expired" in err and json.loads(out[out.index("{") :])["tuning"]["trials"]["measured"] > 0
