"""The starter bundle shipped with the package: listed, pulled whole into a new registry, idempotent, and what a
first transfer finds afterwards."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.share.starter import shipped

pytestmark = pytest.mark.tvm


def run_json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout[result.stdout.index("{") :])  # progress and warnings go to stderr


def test_the_starter_bundle_is_shipped_and_listed():
    """The listing says what the shipped file holds, counted from its members, not from its manifest."""
    import zipfile

    rows = run_json("pull", "--list")["rows"]
    starter = next(r for r in rows if r["name"] == "starter")
    with zipfile.ZipFile(next(s for s in shipped() if s.name == "starter").path) as zf:
        lines = {m: len(zf.read(f"{m}.jsonl").splitlines()) for m in ("records", "workloads", "models")}
    assert (starter["records"], starter["workloads"], starter["models"]) == tuple(lines.values())
    assert lines["models"] >= 9  # the 8 models of the corpus run at depth, and a YOLOv8n


def test_pull_imports_the_starter_bundle_once(sqlite_url):
    expected = next(s for s in shipped() if s.name == "starter").records
    first = run_json("--db", sqlite_url, "pull")
    assert first["records_new"] == expected and first["records_skipped"] == 0
    again = run_json("--db", sqlite_url, "pull")
    assert again["records_new"] == 0 and again["records_present"] == expected
    stats = run_json("--db", sqlite_url, "stats")
    assert stats["models"] >= 8 and stats["records_by_source"]
    rows = run_json("--db", sqlite_url, "lookup", "--limit", "10000")["rows"]
    assert {r["trust"] for r in rows} == {"imported"}


def test_an_unknown_shipped_bundle_is_one_line(sqlite_url):
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "pull", "nothing-of-that-name"])
    assert result.exit_code == 1 and "pull --list" in result.output and "Traceback" not in result.output


def test_pull_gives_a_new_registry_a_predictor_for_this_machine(sqlite_url):
    """The starter bundle carries a ranking predictor per x86 class (AVX-512, AVX2), each judged on CPUs it never
    trained on: after `registry pull`, this machine's device ranks with its class's from its first transfer or
    tuning run: as a sibling's, or as its own where this machine is the bundle's device (the same CPU, cores and
    threads)."""
    from tvm.target import Target

    from registry.store.sql.store import Store
    from registry.tvm_side.predictor import predictor_for
    from registry.tvm_side.ranker import RankingModel, device_class
    from registry.tvm_side.target import device_spec, host_target, runtime_threads

    pulled = run_json("--db", sqlite_url, "pull")
    assert pulled["predictors_new"] >= 2, pulled
    rows = run_json("--db", sqlite_url, "predictor", "list")["rows"]
    for row in rows:
        assert row["kind"] == "xgb-rank-v1" and row["metrics"]["held_out"]["top1"] > row["metrics"]["random"]["top1"]
        unseen = row["metrics"]["unseen_devices"].values()
        assert unseen and all(u["top1"] > u["random_top1"] for u in unseen)
    table = CliRunner().invoke(cli, ["--db", sqlite_url, "predictor", "list"]).stdout
    assert "top1 on unseen devices" in table and all(name in table for name in rows[0]["metrics"]["unseen_devices"])
    store = Store(sqlite_url)
    classes = {device_class(Target(json.loads(d.target_json))): d for d in store.all_devices()}
    assert {"llvm 512-bit", "llvm 256-bit"} <= set(classes) and len(rows) == len(classes)
    here = store.add_device(device_spec(host_target(), runtime_threads()))
    found = predictor_for(store, here)
    mine = classes.get(device_class(host_target()))
    expected = None if mine is None or mine.id == here else f"{mine.id}:{mine.name}"
    assert found is not None and (found.sibling == expected or mine is None), (found.sibling, expected)
    assert isinstance(found.model, RankingModel) and found.model.booster is not None
    again = run_json("--db", sqlite_url, "pull")
    assert again["predictors_new"] == 0 and again["predictors_present"] >= 2
