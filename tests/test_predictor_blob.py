"""Stored predictors are data: a crafted blob in the database runs no code, and a bad one does not stop tuning."""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.errors import RegistryWarning
from registry.store.sql.store import Store
from registry.store.values import PredictorIn
from registry.tvm_side import predictor_blob, zoo


@pytest.fixture(autouse=True)
def _one_xgboost_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # 2 shared cores: 2 XGBoost threads train 5-15x slower than 1


@pytest.fixture(scope="module")
def trained():
    """An XGBModel trained on three synthetic feature groups (MetaSchedule's 164 features per block row)."""
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

    from registry.tvm_side.predictor import new_model

    rng = np.random.default_rng(0)
    model, xs, ys = new_model(), [], []
    model.config = model.config._replace(nthread=1)
    for g in range(3):
        features = [rng.random((int(rng.integers(1, 4)), 164), dtype=np.float32) for _ in range(8)]
        costs = rng.random(8).astype("float32") + 0.1
        model.data[f"group{g}"] = FeatureGroup(f"group{g}", features, costs)
        model.data_size += len(costs)
        xs += features
        ys += list(costs.min() / costs)
    model._train(xs, np.array(ys))
    return model, xs


def test_round_trip_keeps_predictions_and_training_data(trained):
    from registry.tvm_side.predictor import from_bytes, to_bytes

    model, xs = trained
    loaded = from_bytes(to_bytes(model))
    np.testing.assert_allclose(loaded._predict(xs), model._predict(xs), rtol=1e-6)
    assert loaded.data_size == model.data_size and list(loaded.data) == list(model.data)
    for key, group in model.data.items():
        assert [f.shape for f in loaded.data[key].features] == [f.shape for f in group.features]
        np.testing.assert_array_equal(loaded.data[key].costs, group.costs)
    assert loaded.num_warmup_samples == 0  # predicts from the first trial, not at random


@pytest.mark.parametrize("parallel_trees", [1, 3])
def test_boosters_xgboost_writes_pass_the_checks(parallel_trees):
    """Rounds of several trees (``num_parallel_tree``), and JSON of an older XGBoost without ``iteration_indptr``."""
    import xgboost as xgb

    rng = np.random.default_rng(0)
    params = {"max_depth": 3, "num_parallel_tree": parallel_trees, "nthread": 1, "subsample": 0.8}
    booster = xgb.train(params, xgb.DMatrix(rng.random((64, 5)), label=rng.random(64)), num_boost_round=4)
    model = json.loads(booster.save_raw("json"))
    assert len(model["learner"]["gradient_booster"]["model"]["trees"]) == 4 * parallel_trees
    predictor_blob.check_booster(model, 5)
    del model["learner"]["gradient_booster"]["model"]["iteration_indptr"]
    predictor_blob.check_booster(model, 5)


# -- blobs that must not decode ----------------------------------------------------------------------------------


class _WritesAFile:
    """Unpickling this writes ``path``: what a crafted predictor row would do on every client that loads it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (exec, (f"open({str(self.path)!r}, 'w').write('ran')",))


def _evil_npy(marker: Path) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([_WritesAFile(marker)], dtype=object), allow_pickle=True)
    return buf.getvalue()


def _legacy_blob(marker: Path) -> bytes:
    """XGBModel.save's tar, with a data.npy that runs code when XGBModel.load reads it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (("model.bin", b"{}"), ("data.npy", _evil_npy(marker))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _rezip(blob: bytes, **replace: bytes) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(blob))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in src.namelist():
            z.writestr(name, replace.get(name.replace(".", "_"), src.read(name)))
    return out.getvalue()


def _edit_index(blob: bytes, edit) -> bytes:
    """The blob with ``edit`` applied to its booster's model (its trees and their index)."""
    model = json.loads(zipfile.ZipFile(io.BytesIO(blob)).read("booster.json"))
    edit(model["learner"]["gradient_booster"]["model"])
    return _rezip(blob, booster_json=json.dumps(model).encode())


def _edit_booster(blob: bytes, edit) -> bytes:
    """The blob with ``edit`` applied to its first tree."""
    return _edit_index(blob, lambda model: edit(model["trees"][0]))


def _cycle(tree):
    tree["left_children"][1] = 0


def _child_outside(tree):
    tree["right_children"][0] = 10**6


def _feature_outside(tree):
    tree["split_indices"][0] = 10**6


BAD_BLOBS = {
    "a pickle": lambda blob, marker: pickle.dumps(_WritesAFile(marker)),
    "XGBModel's tar": lambda blob, marker: _legacy_blob(marker),
    "pickled features": lambda blob, marker: _rezip(blob, g0_features_npy=_evil_npy(marker)),
    "features of another width": lambda blob, marker: _rezip(
        blob, g0_features_npy=predictor_blob._npy(np.zeros((3, 7), "float32"))
    ),
    "another format version": lambda blob, marker: _rezip(
        blob, predictor_json=json.dumps({"format": predictor_blob.FORMAT, "version": 9}).encode()
    ),
    "a tree that loops": lambda blob, marker: _edit_booster(blob, _cycle),
    "a child outside the tree": lambda blob, marker: _edit_booster(blob, _child_outside),
    "a feature outside the features": lambda blob, marker: _edit_booster(blob, _feature_outside),
    # XGBoost itself corrupts its heap loading a short tree_info (the process aborts), and loads the others
    "a short tree_info": lambda blob, marker: _edit_index(blob, lambda m: m.__setitem__("tree_info", [0])),
    "a tree in another output group": lambda blob, marker: _edit_index(
        blob, lambda m: m["tree_info"].__setitem__(0, 5)
    ),
    "rounds that step back": lambda blob, marker: _edit_index(
        blob, lambda m: m.__setitem__("iteration_indptr", [0, len(m["trees"]), 1, len(m["trees"])])
    ),
    "rounds that are not a list": lambda blob, marker: _edit_index(
        blob, lambda m: m.__setitem__("iteration_indptr", 5)
    ),
    "rounds counted in booleans": lambda blob, marker: _edit_index(
        blob, lambda m: m.__setitem__("iteration_indptr", [False, *range(1, len(m["trees"]) + 1)])
    ),
    "output groups as floats": lambda blob, marker: _edit_index(
        blob, lambda m: m.__setitem__("tree_info", [0.0] * len(m["trees"]))
    ),
    "two trees of one id": lambda blob, marker: _edit_booster(blob, lambda tree: tree.__setitem__("id", 1)),
    "truncated": lambda blob, marker: blob[: len(blob) // 2],
}


@pytest.mark.parametrize("case", list(BAD_BLOBS))
def test_bad_blobs_are_refused_without_running_anything(case, trained, tmp_path):
    from registry.tvm_side.predictor import from_bytes, to_bytes

    marker = tmp_path / "ran"
    blob = BAD_BLOBS[case](to_bytes(trained[0]), marker)
    with pytest.raises(predictor_blob.BadPredictorBlob):
        from_bytes(blob)
    assert not marker.exists()


def test_the_crafted_legacy_blob_does_run_code_in_xgbmodel_load(tmp_path):
    """The threat is real: TVM's own loader runs the crafted blob's code (in a child process, to keep it away)."""
    marker = tmp_path / "ran"
    blob = tmp_path / "model.tar"
    blob.write_bytes(_legacy_blob(marker))
    code = (
        "import sys; from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBModel\n"
        "try: XGBModel().load(sys.argv[1])\nexcept Exception: pass"
    )
    subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, timeout=120)
    assert marker.read_text() == "ran"


def _plant(store: Store, device_id: int, kind: str, blob: bytes) -> None:
    store.save_predictor(PredictorIn(device_id, kind, blob, {}, n_workloads=1, n_records=1, tvm_version="0.27.0"))


@pytest.mark.parametrize(("kind", "fragment"), [("xgb", "old format"), ("xgb-v2", "cannot be read")])
def test_load_predictor_skips_a_bad_blob_with_one_warning(sqlite_url, tmp_path, kind, fragment):
    from registry.tvm_side.predictor import load_predictor
    from registry.tvm_side.target import device_spec, host_target

    store = Store(sqlite_url)
    device_id = store.add_device(device_spec(host_target(), 1))
    marker = tmp_path / "ran"
    _plant(store, device_id, kind, _legacy_blob(marker) if kind == "xgb" else pickle.dumps(_WritesAFile(marker)))
    with pytest.warns(RegistryWarning, match=fragment) as caught:
        assert load_predictor(store, device_id) is None
    assert len(caught) == 1 and "registry predictor train --device" in str(caught[0].message)
    assert not marker.exists()


@pytest.mark.tvm
def test_tune_and_transfer_finish_past_crafted_predictors(sqlite_url, tmp_path):
    """A crafted blob as the device's newest predictor, old format then new: no code runs, both commands finish, and
    each says once why it went on without the predictor."""
    from registry.tvm_side.target import device_spec, host_target, runtime_threads

    models = [tmp_path / "a.onnx", tmp_path / "b.onnx"]
    onnx.save(zoo.mlp(8, (32, 16), seed=7), models[0])
    onnx.save(zoo.mlp(4, (48, 24), seed=8), models[1])
    store = Store(sqlite_url)
    device_id = store.add_device(device_spec(host_target(), runtime_threads()))
    marker = tmp_path / "ran"
    runs = [  # transfer first: with no donor in the registry yet, its task goes to the tuning engine
        ("xgb-v2", pickle.dumps(_WritesAFile(marker)), ["transfer", str(models[0]), "--tune-trials", "4"]),
        ("xgb", _legacy_blob(marker), ["tune", str(models[1]), "--trials", "4", "--batch", "4"]),
    ]
    for kind, blob, args in runs:
        _plant(store, device_id, kind, blob)
        result = CliRunner().invoke(cli, ["--db", sqlite_url, *args])
        assert result.exit_code == 0, result.output
        warned = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
        assert len(warned) == 1 and "tuning goes on without it" in warned[0], result.stderr
        assert "end-to-end latency" in result.stdout
        assert not marker.exists()


def _booster_json(width: int, **params) -> bytes:
    import xgboost as xgb

    rng = np.random.default_rng(0)
    x, y = rng.random((40, width), dtype=np.float32), rng.integers(0, 3, 40)
    booster = xgb.train({"max_depth": 2, "nthread": 1, **params}, xgb.DMatrix(x, y), num_boost_round=2)
    return bytes(booster.save_raw("json"))


def test_each_kind_reads_only_its_own_rows():
    """A blob's kind says which rows its booster reads: one labelled with the other kind, or of another width, would
    rank on columns that mean something else, silently. And a booster answering several numbers a row ranks nothing."""
    rank = predictor_blob.encode(
        _booster_json(predictor_blob.RANK_WIDTH), [], width=predictor_blob.RANK_WIDTH, layout=predictor_blob.RANK_LAYOUT
    )
    assert predictor_blob.decode_kind(predictor_blob.RANK_KIND, rank).layout == predictor_blob.RANK_LAYOUT
    with pytest.raises(predictor_blob.BadPredictorBlob, match="not a xgb-v2 predictor"):
        predictor_blob.decode_kind(predictor_blob.KIND, rank)
    narrow = predictor_blob.encode(_booster_json(8), [], width=8, layout=predictor_blob.RANK_LAYOUT)
    with pytest.raises(predictor_blob.BadPredictorBlob, match="not a xgb-rank-v1 predictor"):
        predictor_blob.decode_kind(predictor_blob.RANK_KIND, narrow)
    width = predictor_blob.RANK_WIDTH
    classes = _booster_json(width, objective="multi:softprob", num_class=3)
    with pytest.raises(predictor_blob.BadPredictorBlob, match="one score a row"):
        predictor_blob.decode(predictor_blob.encode(classes, [], width=width, layout=predictor_blob.RANK_LAYOUT))


def test_a_bundles_predictor_scores_must_be_in_their_range():
    from registry.share.bundle import metrics_problem

    good = {"held_out": {"top1": 0.7, "spearman": -0.2}, "random": {"top1": 0.4, "spearman": 0.0}}
    assert metrics_problem(good) is None
    assert "top1" in metrics_problem({**good, "held_out": {"top1": 7.0, "spearman": 0.1}})
    assert "spearman" in metrics_problem({**good, "random": {"top1": 0.4, "spearman": -3.0}})


def test_a_bundles_predictor_names_what_it_was_trained_on_in_one_printable_line():
    from registry.share.bundle import metrics_problem

    named = {"device": "1:llvm-znver4-2c-1t", "trained_on": "llvm-znver4-2c-1t (24898 programs)"}
    assert metrics_problem(named) is None
    assert "control character" in metrics_problem({"trained_on": "x\n\x1b[2Jforged line"})
    assert "more than 200" in metrics_problem({"device": "d" * 201})


def test_a_bundles_predictor_scores_on_unseen_devices_are_named_and_in_their_range():
    """What `predictor list` and a transfer's report print of a predictor judged on devices it never trained on."""
    from registry.share.bundle import MAX_UNSEEN, metrics_problem

    scores = {"workloads": 75, "top1": 0.79, "top5": 0.95, "random_top1": 0.30}
    assert metrics_problem({"unseen_devices": {"llvm-skylake-2c-1t": scores}}) is None
    assert "control character" in metrics_problem({"unseen_devices": {"x\x1b[2J": scores}})
    assert "random_top1" in metrics_problem({"unseen_devices": {"d": {**scores, "random_top1": 1.5}}})
    assert "finite" in metrics_problem({"unseen_devices": {"d": {**scores, "top1": float("nan")}}})
    assert "finite" in metrics_problem({"unseen_devices": {"d": [0.7]}})
    assert "not an object" in metrics_problem({"unseen_devices": None})
    many = {f"d{i}": scores for i in range(MAX_UNSEEN + 1)}
    assert f"at most {MAX_UNSEEN}" in metrics_problem({"unseen_devices": many})
