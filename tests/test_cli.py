"""The CLI as a user drives it: help, output, and one clear line for every kind of bad input."""

from __future__ import annotations

import base64
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from registry.cli.main import cli

from registry import testing, tvmlog
from registry.store.store import Store


def run(url: str, *args: str):
    return CliRunner().invoke(cli, ["--db", url, *args])


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["db"],
        ["db", "upgrade"],
        ["db", "current"],
        ["import"],
        ["export"],
        ["lookup"],
        ["stats"],
        ["devices"],
        ["index"],
        ["index", "status"],
        ["index", "rebuild"],
        ["transfer"],
    ],
)
def test_every_command_has_help_with_an_example(command, sqlite_url):
    result = run(sqlite_url, *command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.output


def test_lookup_table_and_json(sqlite_url):
    store = Store(sqlite_url)
    dev = testing.device()
    store.ingest(
        [testing.workload(i) for i in range(3)], [testing.record(i, j, dev) for i in range(3) for j in range(2)]
    )
    table = run(sqlite_url, "lookup", "--op", "matmul")
    assert table.exit_code == 0 and "matmul" in table.output and "conv2d" not in table.output
    rows = json.loads(run(sqlite_url, "lookup", "--json", "--top-k", "2").output)
    assert len(rows) == 6 and {r["rank"] for r in rows} == {1, 2}
    assert {"workload", "op", "task", "args", "device", "latency_us", "source"} <= rows[0].keys()
    stats = json.loads(run(sqlite_url, "stats", "--json").output)
    assert stats["records"] == 6 and stats["workloads"] == 3
    assert "synthetic" in run(sqlite_url, "devices").output


@pytest.mark.parametrize("existing", [False, True])
def test_lookup_does_not_import_tvm(sqlite_url, existing):
    """Never TVM; and on an existing database not even SQLAlchemy (0.2 s of start-up): lookup must stay fast."""
    if existing:
        Store(sqlite_url).ingest([testing.workload(0)], [testing.record(0, 0, testing.device())])
    code = (
        "import sys, json; from registry.cli.main import cli; "
        f"cli(['--db', {sqlite_url!r}, 'lookup', '--op', 'conv2d', '--json'], standalone_mode=False); "
        "assert not any(m == 'tvm' or m.startswith('tvm.') for m in sys.modules), 'lookup imported TVM'; "
        f"assert {existing} == ('sqlalchemy' not in sys.modules), 'fast path not taken'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) == int(existing)


def test_unknown_device(sqlite_url):
    Store(sqlite_url).ingest([testing.workload(0)], [testing.record(0, 0, testing.device())])
    assert_one_line_error(run(sqlite_url, "lookup", "--device", "tpu-9000"), "tpu-9000", "registry devices")
    assert_one_line_error(run(sqlite_url, "export", "-o", "x", "--device", "42"), "no device '42'")


@pytest.mark.parametrize(
    "url, fragment",
    [("postgresql://nobody@127.0.0.1:1/nothing", "cannot use database"), ("not a url", "not a database URL")],
)
def test_unreachable_or_malformed_database_url(url, fragment):
    assert_one_line_error(run(url, "stats"), fragment)


def test_bad_shape_filter(sqlite_url):
    assert_one_line_error(run(sqlite_url, "lookup", "--shape", "1,x,3"), "--shape")


# -- bad logs: each is refused with one line, and the registry is left exactly as it was -------------------------


def _rewrite_lines(file: Path, edit) -> None:
    lines = file.read_text().splitlines()
    file.write_text("\n".join(edit(lines)) + "\n")


def _other_tvm_version(lines):
    shash, b64 = json.loads(lines[0])
    graph = json.loads(tvmlog.decode_module(b64))
    graph["metadata"]["tvm_version"] = "0.26.0"
    text = json.dumps(graph).encode()
    return [json.dumps([shash, base64.b64encode(struct.pack("<Q", len(text)) + text).decode()])] + lines[1:]


BAD_LOGS = {
    "malformed record line": (tvmlog.RECORD_FILE, lambda ls: ls[:1] + ["[0, {not json"] + ls[1:], "not valid JSON"),
    "truncated log": (tvmlog.RECORD_FILE, lambda ls: ls[:-1] + [ls[-1][: len(ls[-1]) // 2]], "truncated"),
    "record of a missing workload": (
        tvmlog.RECORD_FILE,
        lambda ls: ls + [json.dumps([7] + json.loads(ls[0])[1:])],
        "refers to workload line 8",
    ),
    "record of wrong structure": (tvmlog.RECORD_FILE, lambda ls: ls + ["[0, [1, 2]]"], "expected [workload_index"),
    "corrupt workload payload": (tvmlog.WORKLOAD_FILE, lambda ls: ['["123", "!!!not base64!!!"]'], "corrupt"),
    "workload payload that is not JSON": (
        tvmlog.WORKLOAD_FILE,
        lambda ls: [json.dumps(["123", base64.b64encode(struct.pack("<Q", 9) + b"not json!").decode()])],
        "not JSON",
    ),
    "trace that does not apply": (
        tvmlog.RECORD_FILE,
        lambda ls: ls + [json.dumps([0, [[[["NoSuchInstruction", [], [], []]], []]] + json.loads(ls[0])[1][1:]])],
        "does not apply to its workload",
    ),
    "workload of another TVM": (tvmlog.WORKLOAD_FILE, _other_tvm_version, "TVM 0.26.0"),
}


@pytest.mark.tvm
@pytest.mark.parametrize("case", list(BAD_LOGS))
def test_bad_logs_are_refused_and_leave_the_database_untouched(case, db_url, tuned_logs, tmp_path):
    good = run(db_url, "import", str(tuned_logs.work_dir), "--team", "a")
    assert good.exit_code == 0, good.output
    before = Store(db_url).stats()

    bad = tmp_path / "bad"
    shutil.copytree(tuned_logs.work_dir, bad)
    target, edit, fragment = BAD_LOGS[case]
    _rewrite_lines(bad / target, edit)
    assert_one_line_error(run(db_url, "import", str(bad), "--team", "b"), fragment)
    assert Store(db_url).stats() == before


@pytest.mark.tvm
def test_binary_garbage_is_refused(sqlite_url, tmp_path):
    (tmp_path / tvmlog.WORKLOAD_FILE).write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    (tmp_path / tvmlog.RECORD_FILE).write_bytes(b"\x00\x01")
    assert_one_line_error(run(sqlite_url, "import", str(tmp_path)), "not")


def test_missing_path_is_refused(sqlite_url, tmp_path):
    assert_one_line_error(run(sqlite_url, "import", str(tmp_path / "nope")), "no such file")
    assert_one_line_error(run(sqlite_url, "import", str(tmp_path)), "no database_workload.json")


def test_console_script_prints_no_traceback(tmp_path):
    exe = Path(sys.executable).with_name("registry")
    result = subprocess.run(
        [str(exe), "--db", "sqlite:///" + str(tmp_path / "r.db"), "lookup", "--device", "nope"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("Error:"), result.stderr
