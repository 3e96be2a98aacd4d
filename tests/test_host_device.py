"""`--device host` on a machine whose registry also holds plain TVM's usual records, tuned for a generic CPU (no mcpu
in the target): "host" is the device transfer and tune file under, and the generic records serve it, after its own."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.tvm_side import tvmlog

pytestmark = pytest.mark.tvm


def _generic_copy(logs, dest):
    """The log as plain TVM writes it by default: the target names no mcpu."""
    shutil.copytree(logs, dest)
    lines = (dest / tvmlog.RECORD_FILE).read_text().splitlines()
    out = []
    for line in lines:
        record = json.loads(line)
        record[1][2].pop("mcpu", None)
        out.append(json.dumps(record))
    (dest / tvmlog.RECORD_FILE).write_text("\n".join(out) + "\n")
    return dest


def _ok(*args):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_host_is_one_device_beside_generic_records_and_they_serve_it(sqlite_url, tuned_logs, tmp_path):
    import registry

    generic = _generic_copy(tuned_logs.work_dir, tmp_path / "generic")
    _ok("--db", sqlite_url, "import", str(generic))
    _ok("--db", sqlite_url, "import", str(tuned_logs.work_dir))
    devices = json.loads(_ok("--db", sqlite_url, "devices", "--json"))["rows"]
    assert len(devices) == 2 and {d["mcpu"] is None for d in devices} == {True, False}
    rows = json.loads(_ok("--db", sqlite_url, "lookup", "--device", "host", "--json"))["rows"]
    assert {r["device"] for r in rows} == {d["name"] for d in devices}  # host: both of this machine's devices
    _ok("--db", sqlite_url, "export", "-o", str(tmp_path / "out"), "--device", "host")  # one device: the mcpu one
    exported = [json.loads(x) for x in (tmp_path / "out" / tvmlog.RECORD_FILE).read_text().splitlines()]
    assert exported and all("mcpu" in r[1][2] for r in exported)

    only_generic = f"sqlite:///{tmp_path / 'generic.db'}"
    _ok("--db", only_generic, "import", str(generic))
    db = registry.database(db=only_generic)  # this machine's device, with its mcpu: no record of its own
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    workload = JSONDatabase(work_dir=str(generic)).get_all_tuning_records()[0].workload.mod
    found = db.get_top_k(db.commit_workload(workload), 3)
    assert found and all("mcpu" in str(r.target) for r in found)  # served under this device's target
