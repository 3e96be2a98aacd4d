"""``registry --db http://host:port lookup|show|stats|devices|report`` (#55): the read commands against a served
registry print what they print against its database (``registry.share.rest_storage.RestStorage`` over
``registry.server.storage_api``), with a reader's token from --token-file or $REGISTRY_TOKEN; an answer that is no
registry's is one line; the commands that write or measure refuse a URL in one line, exit 2. The starter bundle's
records (real models, tasks and traces) on SQLite and PostgreSQL, served on a loopback port (tests/server.py)."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.share.rest_storage import READS, RestStorage, WireError, decode, encode, read_of
from registry.store import values
from registry.store.sql.store import Store
from tests.server import make_token, ok, problem, request, serving

MODEL = "bert-l2-h128"


@pytest.fixture(scope="session")
def starter_file(tmp_path_factory) -> Path:
    """An SQLite registry holding the starter bundle (`registry pull` with no URL), made once."""
    path = tmp_path_factory.mktemp("starter") / "starter.db"
    result = CliRunner().invoke(cli, ["--db", str(path), "pull"])
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def starter(request, starter_file, tmp_path_factory) -> str:
    """The starter registry on each backend: a copy of the file, or synced into the run's PostgreSQL database."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("copy") / "registry.db"
        shutil.copy(starter_file, path)
        return f"sqlite:///{path}"
    from tests.conftest import _empty_pg

    url = request.getfixturevalue("pg_server_url")
    _empty_pg(url)
    result = CliRunner().invoke(cli, ["sync", str(starter_file), url])
    assert result.exit_code == 0, result.output
    return url


def run(*args: str, env: dict | None = None):
    return CliRunner(env=env).invoke(cli, list(args))


def same(db: str, base: str, token_file: Path, *args: str) -> str:
    """The command's stdout through the database and through the server, which must be the same; returns it."""
    direct = run("--db", db, *args)
    served = run("--db", base, "--token-file", str(token_file), *args)
    assert direct.exit_code == 0, direct.output
    assert served.exit_code == 0, served.output
    assert served.stdout == direct.stdout, args
    return served.stdout


@pytest.mark.tvm
def test_export_by_url_writes_the_logs_the_database_writes_and_a_bundle_is_a_pull(starter, tmp_path):
    from registry.share.export import export_database

    token = make_token(starter, "reader")
    with serving(starter) as base, Store(starter) as db:
        # by URL the server's records as they are: its traces are not replayed here on plain TVM's other kernels
        export_database(db, tmp_path / "file", None, replay_plain=False)
        result = run("--db", base, "export", "-o", str(tmp_path / "url"), env={"REGISTRY_TOKEN": token})
        assert result.exit_code == 0 and "not replayed" in result.output, result.output
        for name in ("database_workload.json", "database_tuning_record.json"):
            mine, theirs = ((tmp_path / where / name).read_text() for where in ("file", "url"))
            assert mine == theirs and len(mine.splitlines()) > 100, name
        result = run("--db", base, "export", "--bundle", str(tmp_path / "b.bundle"), env={"REGISTRY_TOKEN": token})
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and "`registry pull URL`" in lines[0], result.output
        assert not (tmp_path / "b.bundle").exists()


@pytest.mark.tvm  # the starter bundle's records are checked (replayed) as they arrive
def test_the_read_commands_print_through_the_server_what_they_print_through_the_database(starter, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(make_token(starter, "reader") + "\n")
    rows = ok("--db", starter, "lookup", "--limit", "500")["rows"]
    assert len(rows) > 100
    matmul = next(r for r in rows if r["op"] == "matmul")
    shape = ",".join(str(d) for d in matmul["args"][0]["shape"])
    with serving(starter) as base:
        for fmt in ([], ["--json"], ["--format", "csv"]):
            for filters in (
                [],
                ["--op", "conv2d", "--top-k", "2", "--limit", "7"],
                ["--model", MODEL],
                ["--device", "1", "--op", "matmul"],
                ["--shape", shape, "--dtype", "float32"],
                ["--workload", matmul["workload"]],
                ["--trust", "verified"],
            ):
                same(starter, base, token_file, "lookup", *filters, *fmt)
            same(starter, base, token_file, "devices", *fmt)
        assert (
            "no stored schedule matches"
            in run(
                "--db", base, "lookup", "--op", "nothing", env={"REGISTRY_TOKEN": token_file.read_text().strip()}
            ).output
        )
        # stats: the same counts; the database it names is the server, never its database's URL
        direct, served = (ok("--db", db, "--token-file", str(token_file), "stats") for db in (starter, base))
        assert served.pop("database") == base and direct.pop("database") != base
        assert served == direct
        text = run("--db", base, "--token-file", str(token_file), "stats").stdout
        assert text.splitlines()[0].split() == ["database", base]
        assert text.splitlines()[1:] == run("--db", starter, "stats").stdout.splitlines()[1:]
        # show: the schedule replayed from the record the server sends, with its provenance
        for fmt in ([], ["--json"], ["--no-trace"]):
            same(starter, base, token_file, "show", matmul["workload"], *fmt)
        # report: the same page and the same summary
        pages = []
        for db in (starter, base):
            out = tmp_path / f"{len(pages)}.html"
            said = ok("--db", db, "--token-file", str(token_file), "report", MODEL, "-o", str(out))
            assert said.pop("path") == str(out)
            written = re.sub(r"written \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "written (when)", out.read_text())
            pages.append((said, written))  # the two pages are written a second apart at times
        assert pages[0] == pages[1]
        assert pages[0][0]["tasks_with_records"] > 0
        for args in (["report", "no-such-model", "-o", str(tmp_path / "x.html")], ["lookup", "--device", "77"],
                     ["show", "0x1234"]):  # fmt: skip
            result = run("--db", base, "--token-file", str(token_file), *args)
            lines = result.output.strip().splitlines()
            assert result.exit_code == 1 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert not (tmp_path / "x.html").exists()


@pytest.mark.tvm  # the starter bundle's records are checked (replayed) as they arrive
def test_a_token_from_the_environment_or_a_file_and_none_named_in_one_line(starter, tmp_path):
    token = make_token(starter, "reader")
    (tmp_path / "token").write_text(token)
    with serving(starter) as base:
        assert run("--db", base, "devices", env={"REGISTRY_TOKEN": token}).exit_code == 0
        assert run("--db", base, "--token-file", str(tmp_path / "token"), "devices").exit_code == 0
        for command in (["lookup"], ["stats"], ["devices"], ["show", "0x1"], ["report", MODEL, "-o", "/nonexistent/r"]):
            result = run(*command, "--db", base, "--token-file", str(tmp_path / "token"))  # after the subcommand too
            assert "token" not in result.output and "Traceback" not in result.output, result.output
        assert run("devices", env={"REGISTRY_TOKEN": token, "REGISTRY_DATABASE_URL": base}).exit_code == 0
        for env in ({}, {"REGISTRY_TOKEN": "rgt_not-a-token-of-ours"}):
            result = run("--db", base, "lookup", env=env)
            lines = result.output.strip().splitlines()
            assert result.exit_code == 1 and len(lines) == 1, result.output
            assert "401" in lines[0] and "--token-file" in lines[0] and "$REGISTRY_TOKEN" in lines[0], lines[0]
            assert "rgt_not-a-token" not in lines[0]
        result = run("--db", base, "--token-file", str(tmp_path / "missing"), "stats")
        assert result.exit_code == 1 and "cannot read the token file" in result.output
    with serving(starter, public=True) as base:  # a public server: anyone reads
        assert run("--db", base, "stats").exit_code == 0


@pytest.mark.tvm  # the starter bundle's records are checked (replayed) as they arrive
def test_the_storage_reads_refuse_what_is_not_a_read_in_problem_documents(starter):
    token = make_token(starter, "reader")
    with serving(starter) as base:
        assert "no storage read 'ingest'" in problem(request(base + "/api/v1/storage/ingest", token), 404)
        assert request(base + "/api/v1/storage/stats").status == 401
        for args, said in (
            ("nope", "not JSON"),
            ("[1]", "not a JSON object"),
            ('{"selector": 5}', "selector is not str"),
            ('{"colour": "blue"}', "takes no 'colour'"),
            ("{}", "needs 'model_id'"),
        ):
            read = "resolve_devices" if "selector" in args else "model_tasks"
            detail = problem(request(base + f"/api/v1/storage/{read}?args=" + _quoted(args), token), 422)
            assert said in detail, detail
        huge = '{"f": {"limit": 100000000}}'
        assert "out of range" in problem(request(base + "/api/v1/storage/lookup?args=" + _quoted(huge), token), 422)
        assert "'other'" in problem(request(base + "/api/v1/storage/stats?other=1", token), 400)
        answer = request(base + "/api/v1/storage/model_names?args=" + _quoted('{"limit": 3}'), token)
        assert answer.status == 200 and len(answer.json()) == 3
    with Store(starter) as store:  # reads only
        assert store.stats().records == 264


def _quoted(text: str) -> str:
    import urllib.parse

    return urllib.parse.quote(text)


class _Garbage(http.server.BaseHTTPRequestHandler):
    body = b"[]"

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    ("body", "args"),
    [
        (b"<html>not a registry</html>", ["stats"]),
        (b'{"devices": "many"}', ["stats"]),
        (b'[{"id": "one"}]', ["devices"]),
        (b"[1, 2]", ["lookup"]),
        (b'{"record": 1}', ["show", "0x12"]),
        (b"\x00" * 100, ["devices"]),
    ],
)
def test_a_server_that_answers_garbage_is_one_line(body, args):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("G", (_Garbage,), {"body": body}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        result = run("--db", f"http://127.0.0.1:{server.server_address[1]}", *args)
    finally:
        server.shutdown()
        server.server_close()
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert "is this a registry server" in lines[0], lines[0]


def test_commands_that_write_or_measure_refuse_a_url_in_one_line(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    base = "http://127.0.0.1:9"  # nothing listens: the refusal comes first
    for args in (
        ["import", str(tmp_path)],
        ["predictor", "train"],
        ["db", "upgrade"],
        ["db", "release-leases"],
        ["token", "create", "--role", "reader", "--name", "x"],
        ["serve"],
        ["push", "http://127.0.0.1:9"],
    ):
        for where in (["--db", base, *args], [*args, "--db", base]):
            result = run(*where)
            lines = result.output.strip().splitlines()
            assert result.exit_code == 2 and len(lines) == 1, (where, result.output)
            assert "runs models (transfer, tune)" in lines[0] and "`registry pull URL`" in lines[0], lines[0]
            assert "`registry push URL`" in lines[0], lines[0]
        result = run(*args, env={"REGISTRY_DATABASE_URL": base})
        assert result.exit_code == 2 and "runs models" in result.output, result.output


@pytest.mark.tvm  # the starter bundle's records are checked (replayed) as they arrive
def test_lookup_by_url_imports_no_tvm(starter):
    token = make_token(starter, "reader")
    with serving(starter) as base:
        code = (
            "import sys, json; from registry.cli.main import cli\n"
            f"cli(['--db', {base!r}, 'lookup', '--op', 'matmul', '--json'], standalone_mode=False)\n"
            "assert not any(m == 'tvm' or m.startswith('tvm.') for m in sys.modules), 'lookup imported TVM'\n"
            "assert 'sqlalchemy' not in sys.modules, 'the client opened a database'"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={"REGISTRY_TOKEN": token, "PATH": "/usr/bin:/bin", "HOME": "/tmp"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"]


def test_every_read_travels_with_its_protocols_parameters_and_values_come_back_as_they_left():
    import inspect

    for name, method in READS.items():
        ours = inspect.signature(getattr(RestStorage, name)).parameters.values()
        theirs = inspect.signature(method).parameters.values()
        assert [(p.name, p.kind, p.default) for p in ours] == [(p.name, p.kind, p.default) for p in theirs], name
        read_of(name)  # its annotations resolve
    history = values.RecordHistory(
        [values.RecordPoint(1, 2, __import__("datetime").datetime(2026, 1, 2, 3, 4, 5, 6), 1e-5, "tuned", None)],
        {2: 1}, None,
    )  # fmt: skip
    effort = values.Effort(3, 1.5, ((1, 2.0), (3, 1.0)), True)
    task = values.TaskRow(1, "t<0>", 2, "matmul", b"\x00\xff")
    for value, tp in ((history, values.RecordHistory), ({7: effort}, dict[int, values.Effort]),
                      ([task], list[values.TaskRow]), ((1, "dev"), tuple[int, str] | None)):  # fmt: skip
        assert decode(json.loads(encode(value)), tp, "x") == value
    for bad, tp in (({"1x": 2.0}, dict[int, float]), ([1, "a"], tuple[int, str, str]), (True, int),
                    (1.5, int), ("x", float), ({"id": 1}, values.DeviceRow), ("??", bytes), ("May", values.dt.datetime),
                    (1, str | None)):  # fmt: skip
        with pytest.raises(WireError):
            decode(bad, tp, "x")


def test_a_servers_efforts_are_read_as_stored_ones_are():
    """Efforts a server answers are its claims: one that fails the checks a stored effort gets is left out, a lease
    past the longest a lease may be counts as none (no run waits on it for ever), a holder's name is printable, and
    a workload not asked for is no answer."""
    good = {"trials": 4, "seconds": 2.0, "curve": [[4, 10.0]], "plateau": False}
    body = json.dumps({
        "1": {**good, "holder": "another run", "lease_until": "9999-01-01T00:00:00+00:00"},
        "2": {**good, "trials": 5000, "seconds": 0.0},  # faster than a trial can be measured
        "3": {**good, "holder": "a\x1b[31mb", "lease_until": "2000-01-01T00:00:00+00:00"},
        "7": good,
    }).encode()  # fmt: skip
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("G", (_Garbage,), {"body": body}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        found = RestStorage(f"http://127.0.0.1:{server.server_address[1]}", None).efforts([1, 2, 3], 1)
    finally:
        server.shutdown()
        server.server_close()
    assert sorted(found) == [1, 3]
    assert (found[1].holder, found[1].lease_until, found[1].trials) == (None, None, 4)
    assert "\x1b" not in found[3].holder and found[3].lease_until is not None
