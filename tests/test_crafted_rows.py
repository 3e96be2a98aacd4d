"""Rows that someone with write access crafted or corrupted in a shared registry, read by everyone else: each is
planted in a real registry (a tiny model tuned by plain TVM, imported), then `show`, `export`, `export --bundle`,
`sync`, `transfer` and `tune` run on it. None may crash (a segfault took down `tune` before), end in an internal error
or a traceback, or blow up in memory: a bad row is skipped with a warning naming it, or the command says in one line
why it cannot go on. No reader hands TVM a trace that is not sound."""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.tvm_side import zoo

pytestmark = pytest.mark.tvm


def _best(conn: sqlite3.Connection) -> tuple[int, int]:
    """(record id, skeleton id) of the best record of the model's first workload."""
    return conn.execute(
        "SELECT r.id, r.skeleton_id FROM best_record b JOIN tuning_record r ON r.id = b.record_id "
        "ORDER BY b.workload_id LIMIT 1"
    ).fetchone()


def _decisions(value: str) -> Callable[[sqlite3.Connection], str]:
    def plant(conn):
        rid, _ = _best(conn)
        conn.execute("UPDATE tuning_record SET decisions_json = ? WHERE id = ?", (value, rid))
        return f"record {rid}"

    return plant


def _skeleton(blob: bytes) -> Callable[[sqlite3.Connection], str]:
    def plant(conn):
        _, sid = _best(conn)
        conn.execute("UPDATE trace_skeleton SET insts_json_z = ? WHERE id = ?", (blob, sid))
        return "record"

    return plant


def _workload(blob: bytes) -> Callable[[sqlite3.Connection], str]:
    def plant(conn):
        wid = conn.execute("SELECT workload_id FROM best_record ORDER BY workload_id LIMIT 1").fetchone()[0]
        conn.execute("UPDATE workload SET mod_json_z = ? WHERE id = ?", (blob, wid))
        return f"workload {wid}"

    return plant


def _embedding(conn):
    wid = conn.execute("SELECT workload_id FROM best_record ORDER BY workload_id LIMIT 1").fetchone()[0]
    conn.execute("UPDATE workload SET embedding = ? WHERE id = ?", (b"\x00\x01", wid))
    return f"workload {wid}"


def _device_target(conn):
    conn.execute("UPDATE device SET target_json = ?", ("{not json",))
    return "device"


DEEP = "[" * 20000 + "]" * 20000
BOMB = zlib.compress(b"[" * (64 << 20), 9)  # 64 MiB of JSON that never closes, in about 64 KB

CRAFTED = {
    "decisions pointing past the trace (a segfault in TVM)": _decisions("[[100001,0]]"),
    "decisions that are not JSON": _decisions("[[1,"),
    "decisions nested 20,000 deep": _decisions(DEEP),
    "a trace skeleton that is not zlib": _skeleton(b"not zlib at all"),
    "a trace skeleton nested 20,000 deep": _skeleton(zlib.compress(DEEP.encode())),
    "a trace skeleton that inflates to 64 MiB": _skeleton(BOMB),
    "a workload module that is not zlib": _workload(b"\x78\x9cgarbage"),
    "a workload module that inflates to 64 MiB": _workload(BOMB),
    "a 2-byte embedding": _embedding,
    "a device target that is not JSON": _device_target,
}


@pytest.fixture(scope="module")
def base(tmp_path_factory, tuned_logs) -> tuple[Path, Path]:
    """A registry holding the tiny model's tuned records, and that model as an ONNX file."""
    folder = tmp_path_factory.mktemp("crafted")
    db = folder / "base.db"
    done = CliRunner().invoke(cli, ["--db", str(db), "import", str(tuned_logs.work_dir)])
    assert done.exit_code == 0, done.output
    model = folder / "tiny.onnx"
    onnx.save(zoo.mlp(8, (64, 64)), model)
    return db, model


def _ok_or_one_line(result, label: str) -> None:
    if result.exception is not None and not isinstance(result.exception, SystemExit):  # what went wrong, and where
        import traceback

        raise AssertionError(label + "".join(traceback.format_exception(result.exception))[-1500:])
    assert result.exit_code in (0, 1), (label, result.exit_code, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output, (label, result.output)
    if result.exit_code == 1:
        errors = [line for line in result.stderr.splitlines() if not line.startswith("Warning: ")]
        assert len(errors) == 1 and errors[0].startswith("Error: "), (label, result.stderr)


@pytest.mark.parametrize("name", list(CRAFTED))
def test_a_crafted_row_costs_a_warning_never_a_crash(name, base, tmp_path):
    db = tmp_path / "crafted.db"
    db.write_bytes(base[0].read_bytes())
    with sqlite3.connect(db) as conn:
        where = CRAFTED[name](conn)
        shash = conn.execute("SELECT shash FROM workload ORDER BY id LIMIT 1").fetchone()[0]
    runner = CliRunner()

    def run(*args: str):
        result = runner.invoke(cli, list(args) if args[0] == "sync" else ["--db", str(db), *args])
        _ok_or_one_line(result, " ".join(args[:1]))
        return result

    shown = run("show", shash)
    run("export", "-o", str(tmp_path / "log"))
    run("export", "--bundle", str(tmp_path / "out.bundle"))
    synced = run("sync", str(db), str(tmp_path / "copy.db"))
    transferred = run("transfer", str(base[1]), "--tune-trials", "0", "--json")
    run("tune", str(base[1]), "--trials", "6", "--json")
    said = shown.stderr + synced.stderr + transferred.stderr
    assert where.split()[0] in said or "Error:" in said, said  # the bad row is named where it cost something
    checked = run("check", "--dry-run", "--json")
    if where.startswith(("record", "workload")) and "embedding" not in name:  # registry check finds it
        assert sum(json.loads(checked.stdout)["not_replaying"].values()) >= 1, checked.stdout
    if (tmp_path / "log").exists():  # what was exported is what plain TVM can load
        from tvm.s_tir.meta_schedule.database import JSONDatabase

        JSONDatabase(work_dir=str(tmp_path / "log")).get_all_tuning_records()
    if transferred.exit_code == 0:
        assert json.loads(transferred.stdout)["final_ms"] is not None
