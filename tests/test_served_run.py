"""``registry transfer|tune --db http://SERVER`` with a writer's token (issue 55): the run's records are pushed to the
served registry and its leases taken there (``registry.share.served_run``, ``registry.server.leases_api``). Real TVM
tuning of tiny models against a registry served on a loopback port; two runs at once divide a model's tasks through
the server alone; hostile lease requests are problem documents that change nothing."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from registry.cli.main import cli
from registry.share.remote import RemoteError
from registry.share.served_run import open_served_run, outbox_path
from registry.store.sql.models import TuningRecord
from registry.store.sql.store import Store
from registry.store.values import EffortUpdate
from tests.server import make_token, request, serving
from tests.test_effort import _efforts, _records_by_team
from tests.test_overlay import records
from tests.test_rest_overlay import served_tables, shared_registry
from tests.test_transfer import sibling  # noqa: F401 - a fixture: the tiny model's operator at other shapes


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> Path:
    """Each test's own registry home: the outboxes live there."""
    monkeypatch.setenv("REGISTRY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def run(token: str, *args) -> object:
    return CliRunner(env={"REGISTRY_TOKEN": token}).invoke(cli, [str(a) for a in args])


def report(result) -> dict:
    assert result.exit_code == 0, result.output
    out = result.stdout
    return json.loads(out[out.index("{") :])


@pytest.mark.tvm
def test_tune_by_url_lands_its_records_and_effort_on_the_server(tuned_logs, sibling, tmp_path, home):  # noqa: F811
    shared = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    before = len(records(shared))
    with serving(shared) as base:
        token = make_token(shared, "writer", "alice")
        tuned = report(run(token, "--db", base, "tune", sibling, "--trials", "3", "--team", "vision", "--json"))
        assert tuned["tasks"][0]["trials"] == 3, tuned
        mine = records(shared)[before:]
        assert len(mine) == 3 and {(r.model, r.team, r.source, r.trust) for r in mine} == {
            ("sibling", "vision", "tuned", "imported")  # a client's measurement is its claim on the server
        }, [(r.model, r.team, r.source, r.trust) for r in mine]
        [effort] = [e for e in _efforts(shared) if e.workload_id == mine[0].workload_id]
        assert effort.trials == 3 and effort.holder is None, effort  # recorded there, its lease released
        assert outbox_path(base).is_file() and str(outbox_path(base)).startswith(str(home))
        # A second run finds the first's records on the server, and measures none of them again.
        again = report(run(token, "--db", base, "tune", sibling, "--trials", "2", "--json"))
        assert again["tuning"]["trials"]["measured"] == 0 or len(records(shared)) == before + 3 + 2, again["tuning"]


@pytest.mark.tvm
def test_transfer_by_url_from_python_writes_through_the_server(tuned_logs, sibling, tmp_path, monkeypatch):  # noqa: F811
    import registry

    shared = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    before = len(records(shared))
    with serving(shared) as base:
        monkeypatch.setenv("REGISTRY_TOKEN", make_token(shared, "writer"))
        done = registry.transfer(sibling, db=base, tune_trials=0, candidates=2)
        assert [t.source for t in done.tasks] == ["transferred"]
        [mine] = records(shared)[before:]
        assert (mine.source, mine.model) == ("transferred", "sibling")


def test_a_reader_token_is_one_line_and_writes_nothing(tuned_logs, sibling, tmp_path):  # noqa: F811
    shared = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    with serving(shared) as base:
        token = make_token(shared, "reader")
        before = served_tables(shared)
        for command in ("transfer", "tune"):
            result = run(token, "--db", base, command, sibling)
            lines = result.output.strip().splitlines()
            assert result.exit_code == 1 and len(lines) == 1 and "Traceback" not in result.output, result.output
            assert "writer's token" in lines[0] and "--overlay FILE" in lines[0], lines[0]
        assert served_tables(shared) == before


def _tune(base: str, token: str, model: Path, team: str, home: Path, rpc: str) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("registry")
    cmd = [str(exe), "--db", base, "tune", str(model), "--team", team, "--no-predictor", "--batch", "4", "--json",
           "--trials", "16", "--lease", "2m", "--rpc", rpc]  # fmt: skip
    env = {**os.environ, "TVM_NUM_THREADS": "1", "REGISTRY_TOKEN": token, "REGISTRY_HOME": str(home / team)}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def farm(key: str, servers: int) -> Iterator[str]:
    """TVM's own RPC tracker and ``servers`` RPC servers of ``key``, started as a team starts them (docs/SERVER.md,
    "A tuning farm"); yields the ``--rpc`` address."""
    from registry.measure.tracker import Tracker

    port = _free_port()
    python = [sys.executable, "-m"]
    procs = [subprocess.Popen([*python, "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                               "--port-end", str(port + 1)])]  # fmt: skip
    try:
        for _ in range(servers):
            # a port each: servers started at once on one machine race for the same one (TVM's rpc_server binds the
            # first free port of its range, then listens, and the loser of the race dies at listen)
            own = _free_port()
            procs.append(subprocess.Popen([*python, "tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{port}",
                                           "--key", key, "--host", "127.0.0.1", "--port", str(own),
                                           "--port-end", str(own + 1)]))  # fmt: skip
        deadline = time.monotonic() + 60  # servers register with the tracker a while after they start
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if Tracker("127.0.0.1", port, key).free_servers() >= servers:
                    break
            time.sleep(0.3)
        else:
            raise AssertionError("the RPC servers did not register with the tracker")
        yield f"127.0.0.1:{port}:{key}"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


@pytest.mark.tvm
def test_a_tuning_farm_two_clients_rpc_servers_and_a_served_registry_divide_the_work(mlp, tmp_path, home):
    """Two client machines (each its own registry home, so its own outbox) tune one model against one served
    registry, measuring on two RPC servers behind TVM's tracker: no task is tuned by both, the trials are the budget
    asked, and every record lands in the served registry."""
    url = f"sqlite:///{tmp_path / 'team.db'}"
    Store(url).close()
    with serving(url) as base, farm("farm", 2) as rpc:
        token = make_token(url, "writer")
        runs = [_tune(base, token, mlp, team, home, rpc) for team in ("one", "two")]
        reports = []
        for proc in runs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-3000:]
            reports.append(json.loads(out[out.index("{") :]))
    assert {r["tuning"]["measurer"] for r in reports} == {"rpc"}, [r["tuning"]["summary"] for r in reports]
    teams = _records_by_team(url)
    assert len(teams) == 2 and all(len(t) == 1 for t in teams.values()), teams  # no task tuned by both
    measured = [r["tuning"]["trials"]["measured"] for r in reports]
    with Store(url).read() as s:
        stored = s.execute(select(func.count()).select_from(TuningRecord)).scalar()
    assert sum(measured) == stored and 16 <= stored <= 16 + 2 * 4, measured  # the budget asked, a batch each over
    assert all(e.holder is None for e in _efforts(url))  # every lease released at the end


def _served_run(base: str, token: str, logs) -> tuple:
    """A served run's storage whose outbox holds the real logs' workload, device and records (as a run writes
    them), none pushed yet; and the outbox's ids of that workload and device."""
    from tests.tvm_env import measured_here

    served = open_served_run(base, token)
    measured_here(served.overlay, logs.work_dir, "vision")
    [device] = served.overlay.all_devices()
    [wid] = served.overlay.ok_record_counts(device.id)
    return served, wid, device.id


@pytest.mark.tvm  # naming a workload to the server checks its module with TVM
def test_leases_through_the_server_are_one_runs_and_each_writer_sees_only_its_own(tuned_logs, tmp_path):
    url = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    with serving(url) as base:
        alice, bob = make_token(url, "writer", "alice"), make_token(url, "writer", "bob")
        mine, wid, device = _served_run(base, alice, tuned_logs)
        theirs, bob_wid, bob_device = _served_run(base, bob, tuned_logs)
        try:
            assert mine.take_task(wid, device, "host:1:a", 60) is None
            assert mine.take_task(wid, device, "host:1:a", 60) is None  # renewed: still its own
            assert theirs.take_task(bob_wid, bob_device, "host:1:a", 60) == "alice/host:1:a"  # same name, other token
            assert theirs.release_tasks("host:1:a") == 0  # bob cannot release alice's run
            assert theirs.save_effort(EffortUpdate(bob_wid, bob_device, "host:1:a", (5, 1.0), [(5, 3.0)], False, 60)) \
                is False  # fmt: skip
            assert mine.save_effort(EffortUpdate(wid, device, "host:1:a", (5, 1.0), [(5, 3.0)], False, None))
            assert theirs.take_task(bob_wid, bob_device, "host:2:b", 60) is None  # released: free for bob
            [effort] = theirs.efforts([bob_wid], bob_device).values()  # held by bob's run now: until when, not whose
            assert (effort.trials, effort.curve, effort.holder) == (5, ((5, 3.0),), "another run")
            assert effort.lease_until is not None and effort.held_by_other("host:3:c", dt.datetime.now(dt.UTC))
            assert theirs.release_tasks("host:2:b") == 1
            [effort] = theirs.efforts([bob_wid], bob_device).values()
            assert (effort.holder, effort.lease_until) == (None, None)
        finally:
            mine.close()
            theirs.close()


def test_hostile_lease_requests_are_problem_documents_and_change_nothing(tuned_logs, tmp_path):
    url = shared_registry(f"sqlite:///{tmp_path / 'shared.db'}", tuned_logs)
    with serving(url) as base:
        writer, reader = make_token(url, "writer"), make_token(url, "reader")
        before = served_tables(url)
        with Store(url) as db:  # the device as a run names it, and one the server must refuse
            [row] = db.all_devices()
        device = {"key": row.key, "target": json.loads(row.target_json), "num_threads": row.num_threads,
                  "host_model": row.host_model, "tvm_version": row.tvm_version}  # fmt: skip
        module = {"shash": "0" * 16, "module_equality": "structural", "mod_json": "{}"}
        take = {"workload_id": 1, "device_id": 1, "holder": "h:1:x", "lease_s": 60}
        effort = {"workload_id": 1, "device_id": 1, "holder": "h:1:x", "trials": 1, "seconds": 1.0,
                  "curve": [[1, 2.0]], "plateau": False, "lease_s": 60}  # fmt: skip
        for path, body, token, status, fragment in [
            ("leases/take", take, reader, 403, "writer"),
            ("leases/take", take, None, 401, "token"),
            ("leases/take", {**take, "workload_id": 10**9}, writer, 404, "no workload"),
            ("leases/take", {**take, "device_id": 10**9}, writer, 404, "no device"),
            ("leases/take", {**take, "lease_s": 10**9}, writer, 422, "lease_s"),
            ("leases/take", {**take, "holder": "a\x1b[31mb"}, writer, 422, "holder"),
            ("leases/take", {**take, "holder": "x" * 1000}, writer, 422, "holder"),
            ("leases/take", {**take, "extra": 1}, writer, 422, "extra"),
            ("leases/take", {**take, "holder": "alice/h:1:x"}, writer, 422, "'/'"),  # another token's run
            ("leases/take", {**take, "holder": "x" * 100_000}, None, 401, "token"),  # the token before the body
            ("leases/take", {**take, "holder": "x" * 100_000}, writer, 413, "bytes"),
            ("leases/effort", {**effort, "trials": 5000}, writer, 422, "trials"),
            ("leases/effort", {**effort, "curve": [[1, 1.0], [1, 2.0]]}, writer, 422, "only rise"),
            ("leases/effort", {**effort, "curve": [[10**6, 1.0]]}, writer, 422, "trials up to"),  # past its trials
            ("leases/effort", {**effort, "trials": 4000, "seconds": 0.0}, writer, 422, "faster than a trial"),
            ("leases/effort", {**effort, "trials": -1}, writer, 422, "trials"),
            ("leases/effort", {**effort, "seconds": float("nan")}, writer, 422, "seconds"),
            ("leases/renew", {"holder": "h:1:x"}, writer, 422, "lease_s"),
            ("tasks", {"device": {}, "workloads": []}, writer, 422, "device"),
            # refused as a pushed bundle's device and workloads are (400: what was sent is not what it says)
            ("tasks", {"device": {**device, "key": "f" * 64}, "workloads": []}, writer, 400, "its own description"),
            ("tasks", {"device": {**device, "num_threads": 10**6}, "workloads": []}, writer, 400, "threads"),
            ("tasks", {"device": device, "workloads": [module]}, writer, 400, "workload 0000"),
            ("tasks", {"device": device, "workloads": [module] * 2001}, writer, 422, "workloads"),
        ]:
            answer = _post(f"{base}/api/v1/{path}", body, token)
            assert answer.status == status, (path, body, answer.body)
            assert answer.headers["content-type"] == "application/problem+json", answer.headers
            assert fragment in answer.json()["detail"], (path, answer.json())
        sent = _post(f"{base}/api/v1/leases/take", take, writer, length=False)
        assert sent.status == 411, sent.body
        assert served_tables(url) == before


def _post(url: str, body: dict, token: str | None, length: bool = True):
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    if not length:  # a chunked body declares no length
        data = iter([data])
        headers["Transfer-Encoding"] = "chunked"
    return request(url, method="POST", data=data, headers=headers)


@pytest.mark.tvm
def test_a_server_gone_mid_run_is_one_line_and_the_outbox_keeps_every_record(tuned_logs, tmp_path):
    url = f"sqlite:///{tmp_path / 'team.db'}"
    Store(url).close()
    token = make_token(url, "writer")
    with serving(url) as base:
        served, wid, device = _served_run(base, token, tuned_logs)
        assert served.take_task(wid, device, "h:1:x", 60) is None  # the task named there, its lease taken
    kept = served.overlay.stats().records
    with pytest.raises(RemoteError) as e:  # the batch's records go before its effort: the server is gone
        served.save_effort(EffortUpdate(wid, device, "h:1:x", (1, 1.0), [(1, 2.0)], False, None))
    line = str(e.value)
    assert len(line.splitlines()) == 1 and "cannot reach" in line and f"registry --db {served.path} push" in line
    with pytest.warns(Warning, match="kept in"):
        served.close()  # what is left cannot be sent either: a warning, the outbox closed
    assert records(url) == []
    with serving(url) as again:  # sent later, from the outbox, as the line says
        result = run(token, "--db", served.path, "push", again)
        assert result.exit_code == 0, result.output
    assert len(records(url)) == kept > 0
