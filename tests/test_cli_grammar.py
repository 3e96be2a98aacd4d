"""One CLI grammar (issue 13): the shared options on every command, --db before or after the subcommand (URL or
path), read-only commands that create nothing, JSON with a schema version, CSV, -q/-v, one meaning per flag,
progress lines, shell completion and `registry show`."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from registry import schemas, testing
from registry.cli.main import cli
from registry.cli.options import LOGGERS, configure_logging
from registry.cli.output import Progress
from registry.report.model_report import ModelReport, TaskResult, summary_lines, task_table
from registry.store.sql.store import Store

REPO = Path(__file__).resolve().parents[1]


def leaf_commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    out = []
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out += leaf_commands(command, (*path, name))
        else:
            out.append(((*path, name), command))
    return out


def _filled(url: str) -> None:
    store = Store(url)
    dev = testing.device()
    store.ingest([testing.workload(i) for i in range(3)], [testing.record(i, j, dev) for i in range(3) for j in (0, 1)])
    store.close()


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env=env)


# -- shared options -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [p for p, _ in leaf_commands()], ids=" ".join)
def test_every_command_takes_the_shared_options(path):
    command = dict(leaf_commands())[path]
    names = {opt for p in command.params for opt in p.opts}
    assert {"--json", "--db", "-q", "--quiet", "-v", "--verbose"} <= names, (path, names)


def test_every_row_command_has_format_csv():
    rows = {("lookup",), ("stats",), ("devices",), ("predictor", "list")}
    for path, command in leaf_commands():
        fmt = next((p for p in command.params if p.name == "fmt"), None)
        if path in rows:
            assert fmt is not None and list(fmt.type.choices) == ["table", "json", "csv"], path


def test_shared_options_are_defined_once():
    """--json and --db are spelled in cli/options.py only (they were defined eight times)."""
    for file in (REPO / "cli").glob("*.py"):
        if file.name == "options.py":
            continue
        text = file.read_text()
        assert '"--json"' not in text and '"--db"' not in text and '"--verbose"' not in text, file.name


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("form", ["url", "path"])
def test_db_before_or_after_the_subcommand_as_url_or_path(tmp_path, where, form):
    file = tmp_path / "team.db"
    _filled(f"sqlite:///{file}")
    db = f"sqlite:///{file}" if form == "url" else str(file)
    args = ["--db", db, "stats", "--json"] if where == "before" else ["stats", "--json", "--db", db]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["records"] == 6


def test_db_from_the_environment_and_the_one_after_the_subcommand_wins(tmp_path, monkeypatch):
    filled, other = tmp_path / "filled.db", tmp_path / "missing.db"
    _filled(f"sqlite:///{filled}")
    monkeypatch.chdir(tmp_path)
    from_env = invoke("stats", "--json", env={"REGISTRY_DATABASE_URL": "filled.db"})
    assert from_env.exit_code == 0, from_env.output
    assert json.loads(from_env.stdout)["records"] == 6
    last = invoke("--db", str(other), "stats", "--json", "--db", str(filled))
    assert last.exit_code == 0 and json.loads(last.stdout)["records"] == 6
    assert not other.exists()


def test_json_and_format_must_agree(sqlite_url):
    _filled(sqlite_url)
    result = invoke("--db", sqlite_url, "lookup", "--json", "--format", "csv")
    assert result.exit_code == 2 and "disagree" in result.stderr


# -- read-only commands create nothing ----------------------------------------------------------------------------

READ_ONLY = [
    ["lookup"],
    ["lookup", "--json"],
    ["stats"],
    ["devices"],
    ["export", "-o", "{tmp}/exported"],
    ["show", "0x1234"],
    ["index", "status"],
    ["index", "rebuild"],
    ["predictor", "list"],
    ["predictor", "train"],
    ["db", "current"],
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("missing", ["file", "folder", "empty file"])
@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_read_only_commands_on_a_missing_registry_create_nothing(tmp_path, args, missing):
    if missing == "file":
        db = tmp_path / "typo.db"
    elif missing == "folder":
        db = tmp_path / "nonexistent" / "dir" / "x.db"
    else:
        db = tmp_path / "empty.db"
        db.touch()
    before = _tree(tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    for line in (["--db", f"sqlite:///{db}", *args], [*args, "--db", str(db)]):
        result = CliRunner().invoke(cli, line)
        assert result.exit_code == 1, (line, result.output)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: no registry at"), result.stderr
        assert "Traceback" not in result.output
    assert _tree(tmp_path) == before  # no file, folder, -wal, -shm or lock file


def test_the_default_registry_is_not_created_by_a_read_only_command(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("REGISTRY_HOME", str(home))
    result = invoke("stats")
    assert result.exit_code == 1 and "no registry at" in result.stderr
    assert not home.exists()


def test_the_issue_example_exits_1_and_creates_nothing(tmp_path):
    """`registry --db sqlite:////nonexistent/dir/x.db stats` exited 0 with zeros and made the folder and a lock."""
    target = tmp_path / "nonexistent"
    exe = Path(sys.executable).with_name("registry")
    done = subprocess.run(
        [str(exe), "--db", f"sqlite:///{target}/dir/x.db", "stats"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error: no registry at"), done.stderr
    assert not target.exists()


def test_commands_that_write_create_the_registry(tmp_path):
    db = tmp_path / "new" / "r.db"
    result = invoke("db", "upgrade", "--db", str(db), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["schema_version"] == 1 and out["up_to_date"] and out["before"] is None
    assert db.exists()
    stats = invoke("stats", "--db", str(db), "--json")
    assert stats.exit_code == 0 and json.loads(stats.stdout)["records"] == 0


def test_a_read_only_command_leaves_an_empty_postgresql_database_empty(pg_server_url):
    from sqlalchemy import create_engine, inspect, text

    from tests.test_bad_input import _driver

    engine = create_engine(_driver(pg_server_url), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    result = invoke("stats", "--db", pg_server_url)
    assert result.exit_code == 1 and "holds no registry yet" in result.stderr, result.output
    with engine.connect() as conn:
        assert inspect(conn).get_table_names() == []
    engine.dispose()


# -- output -------------------------------------------------------------------------------------------------------


def test_json_carries_a_schema_version_and_matches_its_model(sqlite_url, tmp_path):
    _filled(sqlite_url)
    cases = {
        ("lookup", "--json"): schemas.LookupOutput,
        ("lookup", "--format", "json"): schemas.LookupOutput,
        ("stats", "--json"): schemas.StatsOutput,
        ("devices", "--json"): schemas.DevicesOutput,
        ("db", "current", "--json"): schemas.DbOutput,
        ("predictor", "list", "--json"): schemas.PredictorListOutput,
        ("export", "-o", str(tmp_path / "out"), "--json"): schemas.ExportOutput,
    }
    for args, model in cases.items():
        result = invoke("--db", sqlite_url, *args)
        assert result.exit_code == 0, (args, result.output)
        data = json.loads(result.stdout)
        assert data["schema_version"] == schemas.SCHEMA_VERSION, args
        model.model_validate(data)
    assert json.loads(invoke("--db", sqlite_url, "export", "-o", str(tmp_path / "o2"), "--json").stdout)["records"]


def test_lookup_csv(sqlite_url):
    _filled(sqlite_url)
    result = invoke("--db", sqlite_url, "lookup", "--format", "csv", "--top-k", "2")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split(",")[:3] == ["op", "task", "shapes"] and len(lines) == 1 + 6
    devices = invoke("--db", sqlite_url, "devices", "--format", "csv").stdout.splitlines()
    assert devices[0].startswith("id,name") and len(devices) == 2


def test_docs_json_is_generated_from_the_models():
    assert (REPO / "docs" / "JSON.md").read_text() == schemas.markdown(), (
        "docs/JSON.md is stale: .venv/bin/python -m registry.schemas > docs/JSON.md"
    )


def test_quiet_prints_only_errors(sqlite_url):
    _filled(sqlite_url)
    loud = invoke("--db", sqlite_url, "lookup", "--op", "softmax-none")
    assert loud.exit_code == 0 and "no stored schedule matches" in loud.stderr
    for args in (["-q", "--db", sqlite_url, "lookup"], ["--db", sqlite_url, "lookup", "-q"]):
        quiet = invoke(*args, "--op", "softmax-none")
        assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr
    error = invoke("--db", sqlite_url, "lookup", "-q", "--device", "nope")
    assert error.exit_code == 1 and error.stderr.startswith("Error:")


def test_verbose_shows_meta_schedules_log():
    try:
        configure_logging(1)
        for name in ("tvm.s_tir.meta_schedule", "tvm.meta_schedule"):
            logger = logging.getLogger(name)
            assert logger.getEffectiveLevel() == logging.INFO and logger.handlers, name
        from registry.verbosity import meta_schedule_level

        assert meta_schedule_level() == logging.INFO  # what the tuning engine sets MetaSchedule's logger to
        configure_logging(2)
        assert logging.getLogger("tvm.s_tir.meta_schedule").level == logging.DEBUG
        configure_logging(-1)
        assert logging.getLogger("tvm.s_tir.meta_schedule").level == logging.ERROR
        assert not any(h.get_name() == "registry-cli" for n in LOGGERS for h in logging.getLogger(n).handlers)
    finally:
        configure_logging(0)


def test_v_counts_before_and_after_the_subcommand(sqlite_url):
    _filled(sqlite_url)
    seen = {}

    @click.command()
    @click.pass_context
    def probe(ctx):
        from registry.cli.options import Context

        seen["v"] = ctx.find_object(Context).verbosity

    try:
        from registry.cli.options import common_options

        cli.add_command(common_options(probe), "probe")
        invoke("-v", "--db", sqlite_url, "probe", "-v")
        assert seen["v"] == 2
        invoke("--db", sqlite_url, "probe", "-q")
        assert seen["v"] == -1
    finally:
        cli.commands.pop("probe", None)
        configure_logging(0)


# -- one meaning per flag, trials counted one way -----------------------------------------------------------------


def test_transfer_budget_is_now_candidates():
    """transfer's count of candidates is --candidates; --budget is tune's, a duration or trials."""
    options = {name: {o for p in cli.commands[name].params for o in p.opts} for name in ("transfer", "tune")}
    assert "--candidates" in options["transfer"] and "--budget" not in options["transfer"]
    assert "--budget" in options["tune"] and "--candidates" not in options["tune"]
    assert "--candidates" in invoke("transfer", "--help").output
    assert "DURATION" in invoke("tune", "--help").output


def test_trials_are_measured_candidates_in_every_table():
    task = TaskResult("t0", 1, 1, "tuned", 10.0, 5.0, candidates=8, trials=8, measurements=8, proposed=17, tune_s=1)
    report = ModelReport("m", "dev", 1, 1.0, 0.5, [task])
    report.tuning = {"trials": {"asked": 8, "stored": 0, "measured": 8}, "summary": "tuning: ok"}
    headers, rows = task_table(report)
    assert dict(zip(headers, rows[0], strict=True))["trials"] == "8"
    assert dict(zip(headers, rows[0], strict=True))["proposed"] == "17"
    [line] = [x for x in summary_lines(report) if x.startswith("tuning cost")]
    assert "8 trials of the 8 asked" in line and "17 proposed" in line
    schemas.ModelReportOutput.model_validate(report.as_json())


# -- progress -----------------------------------------------------------------------------------------------------


def test_progress_lines_have_a_percentage_and_an_eta(capsys):
    with Progress("import") as progress:
        progress.start -= 10  # 10 s in
        progress.first = 0
        progress(25, 100, "25 records read")
        progress(100, 100, "done")
    lines = capsys.readouterr().err.splitlines()  # stderr is no terminal here: plain lines
    assert lines[0].startswith("import   25% [#####") and "25/100" in lines[0] and "ETA 00:30" in lines[0], lines
    assert "100%" in lines[-1]
    with Progress("tune") as resumed:  # 40 trials stored by an earlier run: the pace is this run's
        resumed.start -= 10
        resumed.line(40, 100, "")
        assert "ETA 00:50" in resumed.line(50, 100, "")  # 10 trials in 10 s, 50 to go
    with Progress("tune", seconds=60) as timed:  # a time budget: share of the time spent
        timed.start -= 15
        assert "25%" in timed.line(3, 0, "batch 1") and "ETA 00:45" in timed.line(3, 0, "batch 1")


# -- shell completion ---------------------------------------------------------------------------------------------


def _complete(words: str, env: dict) -> list[str]:
    exe = Path(sys.executable).with_name("registry")
    full = {
        **os.environ,
        **env,
        "_REGISTRY_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    done = subprocess.run([str(exe)], capture_output=True, text=True, env=full, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines() if line]


def test_shell_completion_script_and_device_names(sqlite_url, tmp_path):
    exe = Path(sys.executable).with_name("registry")
    script = subprocess.run(
        [str(exe)], capture_output=True, text=True, env={**os.environ, "_REGISTRY_COMPLETE": "bash_source"}
    )
    assert "complete" in script.stdout and "_registry_completion" in script.stdout
    _filled(sqlite_url)
    env = {"REGISTRY_DATABASE_URL": sqlite_url}
    assert {"lookup", "show", "transfer"} <= set(_complete("registry ", env))
    offered = _complete("registry lookup --device ", env)
    assert offered[0] == "host" and any("synthetic" in o for o in offered) and "1" in offered, offered
    name = next(o for o in offered if "synthetic" in o)
    assert _complete(f"registry export --device {name[:3]}", env) == [o for o in offered if o.startswith(name[:3])]
    # a missing registry: completion offers `host` and creates nothing
    missing = tmp_path / "none.db"
    assert _complete("registry lookup --device ", {"REGISTRY_DATABASE_URL": str(missing)}) == ["host"]
    assert not missing.exists()


# -- show ---------------------------------------------------------------------------------------------------------


def test_show_refuses_an_unknown_workload_in_one_line(sqlite_url):
    _filled(sqlite_url)
    result = invoke("--db", sqlite_url, "show", "0xnothing")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1 and "no ok record" in result.stderr
    several = testing.device(mcpu="other")
    store = Store(sqlite_url)
    store.ingest([testing.workload(0)], [testing.record(0, 5, several)])
    store.close()
    ambiguous = invoke("--db", sqlite_url, "show", testing.shash(0))
    assert ambiguous.exit_code == 1 and "--device" in ambiguous.stderr, ambiguous.output


@pytest.mark.tvm
def test_show_prints_the_best_schedule_as_tvmscript_with_provenance(sqlite_url, tuned_logs):
    assert invoke("--db", sqlite_url, "import", str(tuned_logs.work_dir), "--team", "vision", "-q").exit_code == 0
    [best] = json.loads(invoke("--db", sqlite_url, "lookup", "--json").stdout)["rows"]
    text = invoke("show", best["workload"], "--db", sqlite_url, "--device", str(best["device_id"]))
    assert text.exit_code == 0, text.output
    out = text.stdout
    assert f"# record    {best['record_id']}," in out and "# source    imported" in out and "# team      vision" in out
    assert "@T.prim_func" in out and "def main(" in out  # TVMScript
    assert "sch.get_sblock" in out or "sch.get_block" in out  # the trace, as Python
    data = schemas.ShowOutput.model_validate_json(invoke("--db", sqlite_url, "show", best["workload"], "--json").stdout)
    assert data.record_id == best["record_id"] and data.latency_us == pytest.approx(best["latency_us"])
    assert data.source == "imported" and data.donor is None and "T.prim_func" in data.tvmscript
