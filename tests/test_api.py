"""The plain-TVM hook and the Python API: ``registry.host_target``, ``registry.database``, ``registry.transfer``,
``registry.tune``. Tuning here is tiny: one fused matmul task, a handful of trials."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import registry
from registry.errors import BadInputError
from registry.store.sql.store import Store
from tests.tvm_env import tiny_model, tune_with_plain_tvm

REPO = Path(__file__).resolve().parent.parent


def test_import_registry_and_its_api_do_not_import_tvm():
    code = (
        "import sys, registry\n"
        "fns = [registry.host_target, registry.host_device, registry.database, registry.transfer, registry.tune]\n"
        "loaded = sorted(m for m in sys.modules if m == 'tvm' or m.startswith(('tvm.', 'tvm_ffi')))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_py_typed_ships_with_the_package():
    assert (Path(registry.__file__).parent / "py.typed").is_file()


def device_count(url: str) -> int:
    with Store(url) as store:
        return len(store.all_devices())


@pytest.mark.tvm
def test_tune_relax_through_registry_database_files_under_the_cli_device(tmp_path, sqlite_url):
    """The README's snippet: tune_relax with registry.database() and db.target puts its records under the device
    the CLI measures on (one device row), so `--device host` stays unambiguous and transfer finds them as exact."""
    from registry.measure.measurer import Measurer

    model = tiny_model()
    db = registry.database(db=sqlite_url, model=model.name)
    assert db.target.attrs["mcpu"] == registry.host_target().attrs["mcpu"]
    tune_with_plain_tvm(tmp_path / "work", model, db.target, database=db, trials=4)
    assert len(db) == 4  # each of the 4 trials, written through as measured
    assert device_count(sqlite_url) == 1
    with Measurer(registry.host_target()) as measurer:  # what `registry transfer` / `tune` file records under
        assert measurer.device.key == db.device.key == registry.host_device().key
    with Store(sqlite_url) as store:
        assert store.resolve_one_device("host").id == db.device_id

    onnx_path = tmp_path / "tiny.onnx"
    onnx_path.write_bytes(_tiny_onnx())
    report = registry.transfer(onnx_path, db=sqlite_url, tune_trials=0, dop=1)
    assert isinstance(report, registry.ModelReport)
    assert [t.source for t in report.tasks] == ["exact"]
    assert report.model == "tiny" and report.final_ms is not None
    assert device_count(sqlite_url) == 1


@pytest.mark.tvm
def test_tune_takes_a_relax_module(tmp_path):
    url = str(tmp_path / "plain-path.db")  # a plain file path is a SQLite registry
    mod = tiny_model().mod
    report = registry.tune(mod, db=url, name="relax-mlp", trials=4, batch=4, dop=1, output=tmp_path / "m.so")
    assert isinstance(report, registry.ModelReport)
    assert report.model == "relax-mlp" and len(report.tasks) == 1
    task = report.tasks[0]
    # 4 random candidates usually beat TVM's default schedule of this small matmul, but not always on a busy machine:
    # where none does, the task keeps its default (docs/BENCHMARKS.md, "Rules of the engine", rule 1)
    assert task.measurements == 4 and task.source in ("tuned", "default"), task
    assert task.after_us <= task.before_us * 1.0001, task
    assert (tmp_path / "m.so").is_file()
    assert report.as_json()["tasks"][0]["name"] == report.tasks[0].name
    assert device_count(f"sqlite:///{url}") == 1


@pytest.mark.tvm
def test_model_arguments_are_checked():
    from registry.api import load_model

    with pytest.raises(BadInputError, match="expected an ONNX file"):
        load_model(42)
    with pytest.raises(BadInputError, match="params applies to a Relax"):
        load_model(_tiny_onnx(), params={"w": 1})
    loaded = load_model(_tiny_onnx(), input_shapes=["x=8,64"], name="n")
    assert loaded.name == "n" and loaded.input_shapes == {"x": [8, 64]}


def _tiny_onnx() -> bytes:
    from registry.tvm_side import zoo

    return zoo.mlp(8, (64, 64)).SerializeToString()


_BAD_CALLS = [
    ("transfer", {"team": ""}, "team is empty"),  # it was refused record by record, after the whole run
    ("tune", {"team": "a\nb"}, "control character"),
    ("tune", {"name": "a\nb"}, "control character"),
    ("tune", {"trials": 0}, "trials: 0"),
    ("tune", {"trials": "2"}, "trials: '2'"),
    ("tune", {"keep": float("nan")}, "keep: nan"),
    ("tune", {"predictor": "no"}, "predictor: 'no'"),
    ("tune", {"batch": 0}, "batch: 0"),
    ("tune", {"threads": 2.5}, "threads: 2.5"),
    ("tune", {"progress": 5}, "progress: 5"),
    ("transfer", {"candidates": 2.5}, "candidates: 2.5"),
    ("transfer", {"tune_budget": float("nan")}, "tune_budget: nan"),
    ("transfer", {"retune_below": 5}, "retune_below: 5"),
    ("transfer", {"measure": None}, "measure: None"),  # None switched to the pipeline that measures nothing
    ("transfer", {"input_shapes": "x=8,64"}, "expected a mapping or a list"),  # was read a character a shape
    ("transfer", {"input_shapes": {"x": [0, 64]}}, "whole dimensions of at least 1"),
    ("transfer", {"input_shapes": {"x": "864"}}, "expected an input's name and its dimensions"),
    ("tune", {"db": 5}, "db: expected a database URL"),
    ("transfer", {"output": 5}, "output: expected a file path"),
    ("tune", {"rpc": 5}, "rpc: expected a tracker address"),
    ("tune", {"dop": 0}, "dop: 0"),
]


@pytest.mark.parametrize("function, arguments, says", _BAD_CALLS, ids=[f"{f}-{a}" for f, a, _ in _BAD_CALLS])
def test_arguments_of_the_wrong_type_or_range_are_refused_before_any_work(tmp_path, function, arguments, says):
    """What the CLI's option types refuse, the API refuses too: one BadInputError naming the argument, raised before
    the model is read or the registry opened (it is never created)."""
    db = tmp_path / "registry.db"
    with pytest.raises(BadInputError, match=re.escape(says)):
        getattr(registry, function)(_tiny_onnx(), **{"db": db, **arguments})
    assert not db.exists()


def test_a_list_of_models_is_not_one_path():
    with pytest.raises(BadInputError, match="expected a list of models"):
        registry.tune_models("model.onnx")  # was read a character a model: "/: cannot read (Is a directory)"


@pytest.mark.tvm
def test_numpy_numbers_are_taken_as_numbers_and_the_report_is_json(tmp_path):
    """A NumPy integer ran the whole tuning run and then failed to be written as JSON in its report."""
    import json

    import numpy as np

    report = registry.tune(_tiny_onnx(), db=tmp_path / "r.db", trials=np.int64(2), keep=np.float32(1.0))
    assert json.loads(json.dumps(report.as_json()))["tasks"]


@pytest.mark.tvm
def test_the_database_and_target_helpers_refuse_bad_arguments_before_writing(tmp_path):
    """``registry.database(team="")`` made a database whose every commit refused its record; a thread count of 2.5
    filed a device named "...-2.5t"; ``host_target(-1)`` made a target of -1 cores."""
    db = tmp_path / "registry.db"
    for arguments, says in (
        ({"team": ""}, "team is empty"),
        ({"model": "a\x1b[31m"}, "control character"),
        ({"source": "bogus"}, "source 'bogus'"),
        ({"threads": 2.5}, "threads: 2.5"),
        ({"host_model": 5}, "host_model 5 is not text"),
    ):
        with pytest.raises(BadInputError, match=re.escape(says)):
            registry.database(db=db, **arguments)
        assert not db.exists(), arguments
    with pytest.raises(BadInputError, match=re.escape("num_threads: 2.5")):
        registry.RegistryDatabase(registry.host_target(), f"sqlite:///{db}", num_threads=2.5)
    assert not db.exists()
    for cores in (-1, 0, 2.5, "4"):
        with pytest.raises(BadInputError, match="num_cores"):
            registry.host_target(cores)
    with pytest.raises(BadInputError, match="expected registry.database"):
        registry.compile_model(registry.load_model(_tiny_onnx()).mod, str(db))
    with pytest.raises(BadInputError, match="expected a URL or an SQLite file path"):
        registry.Store(5)
    with pytest.raises(BadInputError, match="expected a Relax IRModule"):
        registry.task_module(registry.load_model(_tiny_onnx()))  # the loaded model, not its module
