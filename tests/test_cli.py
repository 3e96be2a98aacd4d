"""The CLI as a user drives it: help and output (bad input: tests/test_bad_input.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from registry import testing
from registry.cli.main import cli
from registry.store.sql.store import Store


def run(url: str, *args: str):
    return CliRunner().invoke(cli, ["--db", url, *args])


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
    out = json.loads(run(sqlite_url, "lookup", "--json", "--top-k", "2").output)
    assert out["schema_version"] == 1
    rows = out["rows"]
    assert len(rows) == 6 and {r["rank"] for r in rows} == {1, 2}
    assert {"workload", "op", "task", "args", "device", "latency_us", "source"} <= rows[0].keys()
    stats = json.loads(run(sqlite_url, "stats", "--json").output)
    assert stats["records"] == 6 and stats["workloads"] == 3
    assert "synthetic" in run(sqlite_url, "devices").output


@pytest.mark.parametrize("existing", [False, True])
def test_lookup_does_not_import_tvm(sqlite_url, existing):
    """Never TVM; and on an existing database not even SQLAlchemy (0.2 s of start-up): lookup must stay fast. A
    missing database is refused (read-only commands create nothing), without TVM either."""
    if existing:
        Store(sqlite_url).ingest([testing.workload(0)], [testing.record(0, 0, testing.device())])
    code = (
        "import sys, json, click; from registry.cli.main import cli\n"
        "try:\n"
        f"    cli(['--db', {sqlite_url!r}, 'lookup', '--op', 'conv2d', '--json'], standalone_mode=False)\n"
        "except click.ClickException as e:\n"
        "    print(json.dumps({'error': e.message}))\n"
        "assert not any(m == 'tvm' or m.startswith('tvm.') for m in sys.modules), 'lookup imported TVM'\n"
        f"assert {existing} == ('sqlalchemy' not in sys.modules), 'fast path not taken'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    if existing:
        assert len(json.loads(out.stdout)["rows"]) == 1
    else:
        assert "no registry at" in json.loads(out.stdout)["error"]


# Bad input of every kind (logs, models, command lines, databases) is tested in tests/test_bad_input.py.


def test_console_script_prints_no_traceback(tmp_path):
    exe = Path(sys.executable).with_name("registry")
    result = subprocess.run(
        [str(exe), "--db", "sqlite:///" + str(tmp_path / "r.db"), "lookup", "--device", "nope"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("Error:"), result.stderr


def test_progress_on_a_log_is_never_silent_for_long(capsys):
    """stderr that is no terminal (a log, CI) hears the last state again every few seconds while a step runs on,
    and a note at once."""
    import time

    from registry.cli.output import Progress

    with Progress("job", every=0.2) as progress:
        progress(0, 10, "a long first step")
        progress.note("about to do 10 things")
        time.sleep(1.1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "about to do 10 things"
    beats = [line for line in lines if "a long first step" in line]
    assert len(beats) >= 3, lines


def test_a_time_budget_is_the_whole_commands():
    """``--budget`` and ``--tune-budget`` count from the command's start: the API, whose budget counts from its own
    call, gets what is left of them. No limit (None) and no tuning (0) pass as given."""
    from registry.cli.options import Context

    ctx = Context()
    ctx.started -= 12.0  # parsing, opening the registry and starting the workers took 12 s
    assert 167.0 < ctx.left_of(180.0) <= 168.0
    assert ctx.left_of(None) is None and ctx.left_of(0) == 0
    assert 0 < ctx.left_of(5.0) < 0.01  # spent already: the least budget there is, not none and not no limit


def test_export_o_needs_device_only_where_several_devices_hold_records(sqlite_url, tmp_path):
    """TVM's log holds one device: without --device, `export -o` takes the one with records, and where two hold
    records it names both in one line and writes nothing."""
    one, two = testing.device(mcpu="one"), testing.device(mcpu="two")
    with Store(sqlite_url) as store:
        store.ingest([testing.workload(0)], [testing.record(0, 0, one)])
        store.add_device(two)  # a device without records (the starter bundle's AVX2 predictor's) is no choice
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "export", "-o", str(tmp_path / "a"), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["device"].endswith("one-2c-1t"), result.output
    with Store(sqlite_url) as store:
        store.ingest([], [testing.record(0, 1, two)])
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "export", "-o", str(tmp_path / "b")])
    assert result.exit_code == 1 and "several devices" in result.stderr and "--device" in result.stderr, result.output
    assert "one-2c-1t" in result.stderr and "two-2c-1t" in result.stderr and not (tmp_path / "b").exists()
