"""Which records a filter of an exchange selects (#55): ``--model M`` of a pull, bundle export or sync takes the best
record of every task of M on the chosen devices whichever model's run wrote it, as M's page counts coverage; and a
push whose team, model or device filter matches no record here is one line naming what exists, sending nothing.
SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

import pytest

from registry import testing
from registry.store.rows import ModelIn
from registry.store.sql.store import Store
from registry.store.values import ExchangeFilters
from tests.server import EVIL_MODEL, fill, make_token, ok, refused, serving

SHAPES = {"x": [1, 3, 32, 32]}


@pytest.fixture
def shared(db_url) -> str:
    """Two devices; workloads 0 and 1 tuned by model alpha's runs, workload 2 by beta's. Alpha's tasks are 0 and 1,
    beta's 0 and 2 (workload 0 is shared: tuned once, under alpha), gamma's 1 alone (never run itself)."""
    cpu, other = testing.device(), testing.device(mcpu="other")
    wls = [testing.workload(i) for i in range(3)]
    by = {0: "alpha", 1: "alpha", 2: "beta"}
    recs = [
        dataclasses.replace(testing.record(i, j, dev), model=by[i], team=f"team-{by[i]}")
        for i in range(3) for dev in (cpu, other) for j in range(3)
    ]  # fmt: skip
    with Store(db_url) as store:
        store.ingest(wls, recs)
        for name, tasks in (("alpha", (0, 1)), ("beta", (0, 2)), ("gamma", (1,))):
            task_list = [(wls[i], wls[i].signature.task_name, 1) for i in tasks]
            store.save_model(ModelIn(name, name[0] * 64, SHAPES, task_list))
    return db_url


def _selected(url: str, filters: ExchangeFilters) -> tuple[list[tuple[int, str, str | None]], set[str]]:
    """(workload number, device mcpu, model the record names) of each record ``filters`` selects; the models sent."""
    with Store(url) as store, store.read_exchange(filters) as found:
        mcpu = {d.key: d.target["mcpu"] for d in found.devices}
        number = {testing.shash(i): i for i in range(20)}
        rows = [(number[r.workload[0]], mcpu[r.device_key], r.model) for chunk in found.records() for r in chunk]
        return rows, {m.name for m in found.models}


def _workloads(rows) -> dict[int, int]:
    """How many records of each workload (by number)."""
    out: dict[int, int] = {}
    for w, _dev, _model in rows:
        out[w] = out.get(w, 0) + 1
    return out


def test_a_model_takes_the_best_record_of_a_task_another_model_tuned(shared):
    rows, models = _selected(shared, ExchangeFilters(model="beta"))
    # all 6 records beta's runs wrote, and the best of the shared task on each device (written under alpha)
    assert _workloads(rows) == {2: 6, 0: 2}
    assert {(dev, model) for w, dev, model in rows if w == 0} == {("synthetic", "alpha"), ("other", "alpha")}
    assert models == {"beta"}
    rows, models = _selected(shared, ExchangeFilters(model="gamma"))  # a model never run: its task's best records
    assert _workloads(rows) == {1: 2} and models == {"gamma"}
    rows, _ = _selected(shared, ExchangeFilters(model="alpha"))
    assert _workloads(rows) == {0: 6, 1: 6}  # every record its runs wrote, as before


def test_a_model_with_more_best_records_than_a_query_lists_selects_the_same(shared, monkeypatch):
    from registry.store.sql import exchange

    listed = _selected(shared, ExchangeFilters(model="beta"))
    monkeypatch.setattr(exchange, "MAX_LISTED", 1)  # beta has 4 (2 tasks, 2 devices): a subquery instead
    assert _selected(shared, ExchangeFilters(model="beta")) == listed and _workloads(listed[0]) == {2: 6, 0: 2}


def test_the_model_filter_keeps_the_other_filters(shared):
    with Store(shared) as store:
        key = next(d.key for d in store.all_devices() if "other" in d.target_json)
    rows, _ = _selected(shared, ExchangeFilters(model="beta", device_keys=(key,)))
    assert _workloads(rows) == {2: 3, 0: 1} and {dev for _, dev, _ in rows} == {"other"}
    rows, _ = _selected(shared, ExchangeFilters(model="beta", team="team-beta"))
    assert _workloads(rows) == {2: 6}  # the shared task's records are another team's
    rows, _ = _selected(shared, ExchangeFilters(model="beta", best_only=True))
    assert _workloads(rows) == {2: 2, 0: 2}
    assert _selected(shared, ExchangeFilters(model="nope")) == ([], set())


def test_a_bundle_export_of_a_model_holds_the_records_its_page_counts(shared, tmp_path: Path):
    bundle = tmp_path / "beta.bundle"
    out = ok("--db", shared, "export", "--bundle", str(bundle), "--model", "beta")
    assert out["records"] == 8
    with zipfile.ZipFile(bundle) as zf:
        models = [json.loads(line) for line in zf.read("models.jsonl").splitlines()]
    assert [m["name"] for m in models] == ["beta"] and len(models[0]["tasks"]) == 2


# -- a push whose filter matches nothing here ------------------------------------------------------------------------


def test_a_push_filter_that_matches_nothing_names_what_exists_and_sends_nothing(shared):
    base = "http://127.0.0.1:9"  # nothing listens: a refusal must come before the server is asked
    line = refused("--db", shared, "push", base, "--team", "nlpp")
    assert "team 'nlpp'" in line and "'team-alpha'" in line and "'team-beta'" in line, line
    line = refused("--db", shared, "push", base, "--model", "bert")
    assert "model 'bert'" in line and "'alpha'" in line and "'gamma'" in line, line
    line = refused("--db", shared, "push", base, "--team", "team-alpha", "--model", "nope")
    assert "model 'nope'" in line and "team" not in line.split("(")[0].replace("team-", ""), line
    line = refused("--db", shared, "push", base, "--team", "team-beta", "--model", "gamma")
    assert "team 'team-beta' and model 'gamma' together" in line, line
    assert "team 'nlpp'" in refused("sync", shared, base, "--team", "nlpp")  # a sync that pushes, too
    with Store(shared) as store:
        idle = store.add_device(testing.device(mcpu="idle"))  # a device with no record
    line = refused("--db", shared, "push", base, "--device", str(idle))
    assert "the device(s) given" in line and "registry devices" in line, line
    # a filter that matches reaches the server (here: none listens)
    assert "cannot reach" in refused("--db", shared, "push", base, "--team", "team-alpha")


def test_the_names_a_push_refusal_lists_are_bounded_and_escaped(db_url):
    dev = testing.device()
    wls = [testing.workload(i) for i in range(14)]
    teams = [f"t{i}'\"<b>" + "x" * 80 for i in range(14)]
    recs = [dataclasses.replace(testing.record(i, 0, dev), team=teams[i]) for i in range(14)]
    with Store(db_url) as store:
        store.ingest(wls, recs)
    line = refused("--db", db_url, "push", "http://127.0.0.1:9", "--team", "nope")
    assert line.count("\\'\"<b>") == 10 and line.count("'\"<b>") == 10 and line.endswith(", ...)"), line  # escaped
    assert len(line) < 700 and "x" * 41 not in line, line


@pytest.mark.tvm
def test_pull_of_a_model_by_url_brings_every_task_its_page_counts(db_url, tuned_logs, tmp_path: Path):
    """A served registry: the logs' workloads tuned under one model; another model sharing the first of them pulls
    that task's best record (before: a 404, no record of the model)."""
    from tests.tvm_env import logged_workloads

    assert fill(db_url, tuned_logs.work_dir) > 0
    wls = logged_workloads(tuned_logs.work_dir)
    with Store(db_url) as store:
        store.save_model(ModelIn("sibling", "cd" * 32, {"x": [8, 64]}, [(wls[0], "shared", 1)]))
    env = {"REGISTRY_TOKEN": make_token(db_url, "reader")}
    mine = f"sqlite:///{tmp_path / 'mine.db'}"
    with serving(db_url) as base:
        got = ok("--db", mine, "pull", base, "--model", "sibling", env=env)
        assert got["records_new"] == 1  # one device, one task: its best record
        whole = ok("--db", f"sqlite:///{tmp_path / 'whole.db'}", "pull", base, "--model", EVIL_MODEL, env=env)
        assert whole["records_new"] > 1
    rows = ok("--db", mine, "lookup", "--model", "sibling")["rows"]
    assert len(rows) == 1 and rows[0]["workload"] == wls[0].shash
