"""Every write path stores records through the one check (registry/records/write.py), against the module
the registry stores for the record's workload; a record made on another copy of that workload (other block names)
is moved onto the stored copy, and one that still does not replay is refused."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.records.rebase import block_names, rebased, renaming
from registry.tvm_side import tvmlog
from tests.imports import source_files

ROOT = Path(__file__).resolve().parents[1]
THE_DOOR = ROOT / "registry" / "records" / "write.py"
# The storage implementations: the SQL store, and the overlay, which forwards a write it was given to its local file.
STORAGE = ROOT / "registry" / "store"
OVERLAY = ROOT / "registry" / "share" / "overlay.py"
# Every path that writes records: each reaches the store only through THE_DOOR.
WRITE_PATHS = {
    "import": "registry/share/log_import.py",
    "bundle, pull, sync": "registry/share/exchange_import.py",
    "tune (and transfer's fallback tuning)": "registry/pipeline/engine.py",
    "transfer": "registry/pipeline/transfer.py",
    "RegistryDatabase (the Python API's, and tune_relax's)": "registry/records/database.py",
}


def _writes_around_the_door() -> list[str]:
    """Calls of ``.ingest(...)`` / ``.ingest_batches(...)`` that store records anywhere but THE_DOOR and the storage
    implementation. ``ingest(workloads, [])`` stores workloads only."""
    found = []
    for path in source_files():
        if path in (THE_DOOR, OVERLAY) or STORAGE in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in ("ingest", "ingest_batches"):
                continue
            records = node.args[1] if len(node.args) > 1 else None
            if node.func.attr == "ingest" and isinstance(records, ast.List) and not records.elts:
                continue
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_write_path_stores_a_record_around_the_one_check():
    assert _writes_around_the_door() == []
    for what, path in WRITE_PATHS.items():  # and each named path does use it
        text = (ROOT / path).read_text()
        assert "checked_write(" in text or "RecordWriter(" in text, what


def _renamed(mod_json: str, suffix: str = "_elsewhere") -> str:
    """The module with every block renamed, as another model's copy of the same workload would name them."""
    graph = orjson.loads(mod_json)
    nodes = graph["nodes"]
    for node in nodes:
        if node.get("type") == "s_tir.SBlock":
            name = nodes[node["data"]["name_hint"]]
            if name["data"] != "root":
                name["data"] += suffix
    return orjson.dumps(graph).decode()


def test_a_trace_is_moved_between_copies_whose_blocks_are_named_differently():
    trace = [[["GetSBlock", [], ["matmul", "main"], ["b0"]], ["GetSBlock", [], ["matmul_reindex_shared", "main"],
             ["b1"]], ["GetSBlock", [], ["root", "main"], ["b2"]], ["Split", ["b0"], [], []]], [[3, 1]]]  # fmt: skip
    names = {"matmul": "lv21", "T_add": "T_add"}
    moved = rebased(trace, {k: v for k, v in names.items() if k != v})
    assert [i[2][0] for i in moved[0][:3]] == ["lv21", "lv21_reindex_shared", "root"]
    assert moved[0][3] == trace[0][3] and moved[1] == trace[1]


def _store_renamed_copy(url: str, logs: Path) -> str:
    """Stores the log's first workload as another model's copy (other block names) and returns that module."""
    import tvm

    from registry.store.sql.store import Store
    from registry.tvm_side.signature import workload_in

    [workload] = tvmlog.read_workloads(logs / tvmlog.WORKLOAD_FILE)[:1]
    other = _renamed(workload.mod_json)
    assert renaming(workload.mod_json, other) and block_names(other) != block_names(workload.mod_json)
    with Store(url) as store:
        store.ingest([workload_in(tvm.ir.load_json(other))], [])
    return other


@pytest.mark.tvm
def test_an_imported_log_is_moved_onto_the_stored_copy_of_its_workload(sqlite_url, tuned_logs, tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(tuned_logs.work_dir, logs)
    runner = CliRunner()
    # The replay workers now hold the log's own copy of the workload: the renamed copy must not be confused with it
    # (they were kept by the workload's structural hash alone, which the two copies share).
    first = runner.invoke(cli, ["--db", str(tmp_path / "other.db"), "import", str(logs)])
    assert first.exit_code == 0, first.output
    _store_renamed_copy(sqlite_url, logs)
    done = runner.invoke(cli, ["--db", sqlite_url, "import", str(logs)])
    assert done.exit_code == 0, done.output
    checked = json.loads(runner.invoke(cli, ["--db", sqlite_url, "check", "--dry-run", "--json"]).stdout)
    assert checked["checked"] > 0 and checked["not_replaying"] == {}


@pytest.mark.tvm
def test_a_committed_record_is_moved_onto_the_stored_copy_and_a_bad_one_refused(sqlite_url, tuned_logs):
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from registry.errors import BadInputError
    from registry.records.database import RegistryDatabase

    _store_renamed_copy(sqlite_url, tuned_logs.work_dir)
    records = JSONDatabase(work_dir=str(tuned_logs.work_dir)).get_all_tuning_records()
    db = RegistryDatabase(tuned_logs.target, sqlite_url, num_threads=1)
    good = next(r for r in records if r.run_secs and float(r.run_secs[0]) < 1)
    db.commit_tuning_record(good)  # made on the log's copy, stored on the renamed one
    assert len(db) == 1
    checked = json.loads(CliRunner().invoke(cli, ["--db", sqlite_url, "check", "--json"]).stdout)
    assert checked["checked"] == 1 and checked["not_replaying"] == {}
    [stored] = db.get_top_k(db.commit_workload(good.workload.mod), 1)  # replays: from_json would raise otherwise
    assert "_elsewhere" in json.dumps(stored.as_json()[0])
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.schedule import Trace

    tile = next(i for i in good.trace.insts if i.kind.name == "SamplePerfectTile")
    wrong = [2 * int(x) if k == 0 else int(x) for k, x in enumerate(good.trace.decisions[tile])]
    forged = Trace(good.trace.insts, {**dict(good.trace.decisions.items()), tile: wrong})
    # the call goes through TVM's FFI, which hands the BadInputError back as a RuntimeError with its message
    with pytest.raises((BadInputError, RuntimeError), match="refused.*do not multiply"):
        db.commit_tuning_record(TuningRecord(forged, good.workload, good.run_secs, good.target, good.args_info))
    assert len(db) == 1
