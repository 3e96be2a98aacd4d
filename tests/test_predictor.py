"""The pre-trained predictor: trained on real measurements of several workloads, judged on workloads it never saw."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.errors import RegistryError
from registry.store.rows import DeviceSpec
from registry.store.sql.store import Store

# Six dense layers at batch 8, each its own matmul workload: 64->128, 128->32, ... 80->112. Four workloads of 16
# records (training on two, judging two) gave a held-out Spearman from 0.3 to 0.7 between tuning runs, and single
# workloads from -0.4 to 0.8; six of 12 records (training on four) take about as long to tune and judge more steadily.
LAYERS = (64, 128, 32, 96, 48, 80, 112)
N_WORKLOADS = len(LAYERS) - 1
TRIALS_PER_WORKLOAD = 12


@pytest.fixture(autouse=True)
def _one_xgboost_thread(monkeypatch):
    """This machine's 2 cores are shared with other jobs: 2 XGBoost threads trained 5-15x slower than 1 here."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def run(url: str, *args: str):
    return CliRunner().invoke(cli, ["--db", url, *args])


def _tune_layers(work_dir: Path, store: Store, target) -> None:
    """One MetaSchedule run over all the layers, TRIALS_PER_WORKLOAD measured trials each, into the registry.

    Unlike tests/tvm_env.tune_with_plain_tvm (one task), ``num_trials_per_iter`` is the per-task count here:
    MetaSchedule's task scheduler gives each task one round first, so every workload gets its records.
    """
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from registry.measure.builder import PersistentBuilder
    from registry.records.database import RegistryDatabase
    from registry.tvm_side import zoo
    from registry.tvm_side.compat import prepare_tuning
    from registry.tvm_side.frontend import load_onnx

    model = load_onnx(zoo.mlp(8, LAYERS).SerializeToString(), {"x": [8, LAYERS[0]]}, name="predictor-mlp")
    prepare_tuning()
    ms.relax_integration.tune_relax(
        relax.get_pipeline("zero")(model.mod),
        {},
        target,
        str(work_dir),
        max_trials_global=TRIALS_PER_WORKLOAD * N_WORKLOADS,
        num_trials_per_iter=TRIALS_PER_WORKLOAD,
        database=RegistryDatabase(target, store, num_threads=1),
        seed=1,
        builder=PersistentBuilder(),
    )


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A registry holding 6 workloads x 12 real measurements on this machine's device (about 35 s)."""
    from registry.tvm_side.target import device_spec, host_target

    url = f"sqlite:///{tmp_path_factory.mktemp('predictor') / 'registry.db'}"
    target = host_target()
    store = Store(url)
    _tune_layers(tmp_path_factory.mktemp("predictor_work"), store, target)
    device_id = store.add_device(device_spec(target, 1))
    stats = store.stats()
    assert stats.workloads == N_WORKLOADS and stats.per_device[0].tuned_workloads == N_WORKLOADS, stats
    return SimpleNamespace(url=url, store=store, device_id=device_id, target=target, ok_records=stats.records_ok)


# -- without TVM runs ------------------------------------------------------------------------------------------


def test_rank_metrics():
    from registry.tvm_side.predictor_scores import spearman, top_k_recall

    truth = np.array([1.0, 4.0, 2.0, 3.0])
    assert spearman(truth, truth) == pytest.approx(1.0)
    assert spearman(-truth, truth) == pytest.approx(-1.0)
    assert spearman(np.ones(4), truth) == 0.0  # a constant score ranks nothing
    assert spearman(np.array([1.0, 2.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0, 4.0])) == pytest.approx(0.9487, abs=1e-4)
    assert top_k_recall(truth, truth, 1) == 1.0
    assert top_k_recall(-truth, truth, 1) == 0.0
    assert top_k_recall(np.array([0.0, 9.0, 0.5, 0.1]), truth, 2) == 0.5  # picks 4.0 and 2.0; the best two: 4.0, 3.0
    assert top_k_recall(-truth, truth, 5) == 1.0  # k capped at n: all of them


def test_split_says_what_is_missing():
    from registry.tvm_side.predictor import _split

    def source(*counts):
        return SimpleNamespace(device_name="1:dev", counts={i + 1: ("t", n) for i, n in enumerate(counts)})

    with pytest.raises(RegistryError, match="has 1 workload.*needs at least 2 workloads"):
        _split(source(10), 0.25, 0)
    with pytest.raises(RegistryError, match="0 of them with 3\\+ records"):
        _split(source(2, 2, 1), 0.25, 0)
    train, held = _split(source(10, 2, 10, 10), 0.5, 0)
    assert len(held) == 2 and 2 not in held and sorted(train + held) == [1, 2, 3, 4]
    assert _split(source(10), 0, 0) == ([1], [])  # no evaluation: one workload is enough


def test_training_a_device_without_records_is_one_clear_error(sqlite_url):
    store = Store(sqlite_url)
    empty = store.add_device(DeviceSpec({"kind": "llvm", "num-cores": 2}, 1, "some cpu", "0.27.0"))
    result = run(sqlite_url, "predictor", "train", "--device", str(empty))
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith("Error:") and "no ok records" in lines[0] and "at least 1 workload" in lines[0]
    assert store.list_predictors() == []


def test_training_from_python_needs_a_registry_that_exists_and_is_not_served(tmp_path):
    import registry
    from registry.errors import BadInputError

    with pytest.raises(BadInputError, match="not a served registry"):
        registry.train_predictor("https://registry.example.com")
    missing = tmp_path / "none" / "registry.db"
    with pytest.raises(RegistryError):
        registry.train_predictor(missing)
    assert not missing.parent.exists()  # nothing created


def test_predictor_list_reads_the_table_without_importing_tvm(sqlite_url):
    Store(sqlite_url).close()  # an empty registry: `predictor list` is read-only and creates none
    code = (
        "import sys; from click.testing import CliRunner; from registry.cli.main import cli; "
        f"r = CliRunner().invoke(cli, ['--db', {sqlite_url!r}, 'predictor', 'list', '--json']); "
        "import json; assert r.exit_code == 0, r.output; assert json.loads(r.output)['rows'] == [], r.output; "
        "assert not [m for m in sys.modules if m == 'tvm' or m.startswith('tvm.')], 'TVM was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "metrics_json",
    [
        '{"held_out": null, "random": [1], "unseen_devices": null}',
        '{"held_out": {"top1": "0.9"}, "random": {"top1": 0.3}, "unseen_devices": {"d": "x", "e": {"top1": [1]}}}',
        '{"unseen_devices": ["d"]}',
        "[1, 2]",
        "not json",
    ],
)
def test_a_predictor_row_with_crafted_metrics_is_listed_and_judged_on_nothing(sqlite_url, metrics_json):
    """A shared database's row passes no import's check: `predictor list`, a run's report and the measuring it
    warrants read what they can of its metrics and no more."""
    from sqlalchemy import update

    from registry.store.sql.models import Predictor
    from registry.store.values import PredictorIn
    from registry.tvm_side.predictor import LoadedPredictor

    store = Store(sqlite_url)
    device = store.add_device(DeviceSpec({"kind": "llvm", "num-cores": 2}, 1, "some cpu", "0.27.0"))
    store.save_predictor(PredictorIn(device, "xgb-rank-v1", b"blob", {}, 1, 1, "0.27.0"))
    with store.engine.begin() as conn:
        conn.execute(update(Predictor).values(metrics_json=metrics_json))
    result = run(sqlite_url, "predictor", "list")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    [row] = store.list_predictors()
    assert isinstance(row.metrics, dict)
    assert LoadedPredictor(None, 1, row.metrics).warranted(3) == 3


# -- with real measurements ------------------------------------------------------------------------------------


@pytest.mark.tvm
@pytest.mark.parametrize("kind", ["xgb-v2", "xgb-rank-v1"])
def test_held_out_evaluation_judges_workloads_the_model_never_saw(tuned, kind):
    """The mechanics of the held-out evaluation. Whether a model ranks well is judged on the collected dataset's
    hundreds of workloads (tests/test_predictor_dataset.py): six layers of 12 records each gave a mean held-out
    Spearman from -0.2 to 0.5 between tuning runs on a busy machine, too few to judge skill by."""
    from registry.tvm_side.predictor import train

    # the CLI's way: a random third held out
    _, split = train(tuned.store, tuned.device_id, holdout=1 / 3, seed=0, kind=kind)
    held = split["held_out"]
    assert held["workloads"] == 2 and 2 * 3 <= held["records"] <= 2 * TRIALS_PER_WORKLOAD
    assert split["workloads"] == N_WORKLOADS and split["records"] == tuned.ok_records and split["skipped_records"] == 0
    assert -1 <= held["spearman"] <= 1 and 0 <= split["random"]["recall@5"] <= 1
    assert 0 < split["random"]["top1"] <= split["random"]["top5"] <= 1 and 0 < held["top1"] <= held["top5"] <= 1

    # Each workload judged once by a model trained on the other five, on all its records.
    rows = []
    for workload in sorted(tuned.store.ok_record_counts(tuned.device_id)):
        model, m = train(tuned.store, tuned.device_id, held_out=[workload], kind=kind)
        assert model.booster is not None and m["records"] == tuned.ok_records
        assert [r["workload_id"] for r in m["per_workload"]] == [workload]
        rows += m["per_workload"]
    assert len(rows) == N_WORKLOADS and all(3 <= r["records"] <= TRIALS_PER_WORKLOAD for r in rows), rows


def _candidates(tuned, workload_index: int = 0):
    """One stored workload's records as MetaSchedule candidates, rebuilt through TVM's own record API."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from registry.records.database import RegistryDatabase

    records = RegistryDatabase(tuned.target, tuned.store, num_threads=1).get_all_tuning_records()
    mods = {}
    for r in records:
        mods.setdefault(str(r.workload.mod), []).append(r)
    group = list(mods.values())[workload_index]
    candidates = []
    for r in group:
        sch = Schedule(r.workload.mod)
        r.trace.apply_to_schedule(sch, remove_postproc=False)
        candidates.append(ms.MeasureCandidate(sch, r.args_info))
    return ms.TuneContext(mod=group[0].workload.mod, target=tuned.target), candidates


@pytest.mark.tvm
@pytest.mark.parametrize("kind", ["xgb-v2", "xgb-rank-v1"])
def test_save_and_load_round_trip_with_increasing_versions(tuned, kind):
    from registry.tvm_side.predictor import load_predictor, save, train

    assert load_predictor(tuned.store, tuned.device_id + 1000) is None
    model, metrics = train(tuned.store, tuned.device_id, holdout=0, kind=kind)
    assert "held_out" not in metrics
    first = save(tuned.store, tuned.device_id, model, metrics)
    second = save(tuned.store, tuned.device_id, model, metrics)
    assert second == first + 1
    loaded, version = load_predictor(tuned.store, tuned.device_id)
    assert version == second and type(loaded) is type(model)
    if kind == "xgb-v2":
        assert loaded.num_warmup_samples == 0 and loaded.data_size == model.data_size
    else:  # stored without its training rows: the booster alone, its trees all there
        assert loaded.booster.num_boosted_rounds() == model.booster.num_boosted_rounds()
    context, candidates = _candidates(tuned)
    expected = model.predict(context, candidates)
    # Equal predictions, and not the random ones XGBModel gives while it thinks it is warming up.
    np.testing.assert_allclose(loaded.predict(context, candidates), expected, rtol=1e-6)
    np.testing.assert_allclose(loaded.predict(context, candidates), expected, rtol=1e-6)
    assert len(set(np.round(expected, 6))) > 1


@pytest.mark.tvm
def test_workloads_are_read_in_threads_as_one_thread_reads_them_and_an_error_stops_the_rest(tuned, monkeypatch):
    """Training reads workloads in a thread per core: the same groups in the same order as one thread reads them,
    scored from those features as ``predict`` scores the schedules; a workload that fails is named, the workloads
    queued after it are dropped, and no reading thread is left behind."""
    import threading

    from registry.tvm_side.predictor import TrainingSource, _scores, train

    source = TrainingSource(tuned.store, tuned.device_id)
    ids = sorted(source.counts)
    serial = [source.group(source.rows(w), 1) for w in ids]
    threaded = list(source.groups(ids))
    assert [g.workload_id for g in threaded] == ids
    for one, many in zip(serial, threaded, strict=True):
        assert one.skipped == many.skipped and many.candidates is None
        assert len(one.features) == len(many.features) > 0
        assert all(np.array_equal(a, b) for a, b in zip(one.features, many.features, strict=True))
    for kind in ("xgb-v2", "xgb-rank-v1"):
        model, _ = train(tuned.store, tuned.device_id, holdout=0, kind=kind)
        g = serial[0]
        np.testing.assert_allclose(_scores(model, g), model.predict(g.context, g.candidates), rtol=1e-6)

    built, group = [], source.group

    def failing(rows, threads, extractor=None):
        built.append(rows.workload_id)
        if rows.workload_id == ids[1]:
            raise RuntimeError("boom")
        return group(rows, threads, extractor)

    monkeypatch.setattr(source, "group", failing)
    monkeypatch.setattr("registry.tvm_side.cpus.count", lambda: 1)  # one reading thread: the order is certain
    with pytest.raises(RuntimeError, match="boom") as raised:
        list(source.groups(ids))
    assert f"workload {ids[1]}" in "".join(raised.value.__notes__)
    # read in order, a few ahead at most, and none after the error came out: the last workload was never read
    assert built == ids[: len(built)] and len(built) < len(ids), built
    assert not [t for t in threading.enumerate() if t.name.startswith("registry-features")]


@pytest.mark.tvm
def test_cli_train_then_list(tuned):
    result = run(tuned.url, "predictor", "train", "--device", str(tuned.device_id), "--holdout", "0.5", "--json")
    assert result.exit_code == 0, result.output
    trained = json.loads(result.output)
    assert trained["kind"] == "xgb-rank-v1" and trained["held_out"]["workloads"] == 3

    args = ("predictor", "train", "--device", str(tuned.device_id), "--holdout", "0.5", "--kind", "xgb-v2")
    text = run(tuned.url, *args)
    assert text.exit_code == 0, text.output
    assert f"stored predictor v{trained['version'] + 1} (xgb-v2)" in text.output
    assert "top1" in text.output and "spearman" in text.output and "random" in text.output

    listed = run(tuned.url, "predictor", "list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = [r for r in json.loads(listed.output)["rows"] if r["device_id"] == tuned.device_id]
    mine = next(r for r in rows if r["version"] == trained["version"])
    assert mine["n_workloads"] == N_WORKLOADS and mine["n_records"] == trained["records"] == tuned.ok_records
    assert mine["metrics"]["held_out"] == trained["held_out"] and mine["blob_bytes"] > 0
    assert [r["version"] for r in rows] == sorted(r["version"] for r in rows)
    table = run(tuned.url, "predictor", "list")
    assert table.exit_code == 0 and f"{tuned.device_id}:" in table.output


@pytest.mark.tvm
def test_a_ranking_predictor_grows_from_its_base_and_ranks_for_the_device_it_is_loaded_for(tuned):
    from tvm.s_tir.meta_schedule.runner import RunnerResult
    from tvm.target import Target

    from registry.tvm_side import ranker
    from registry.tvm_side.predictor import load_predictor, save, train

    model, metrics = train(tuned.store, tuned.device_id, holdout=0, kind="xgb-rank-v1")
    save(tuned.store, tuned.device_id, model, metrics)
    context, candidates = _candidates(tuned)
    before = model.predict(context, candidates)
    base_trees = model.booster.num_boosted_rounds()
    # The run measures the workload: inverted latencies, so what the model ranked best is now measured slowest.
    results = [RunnerResult([1e-3 * (1 + rank)], None) for rank in np.argsort(np.argsort(before))]
    model.update(context, candidates, results)
    model.update(context, candidates, results)  # twice: the booster grows from its base, not from the last update
    assert model.booster.num_boosted_rounds() == base_trees + ranker.UPDATE_ROUNDS
    after = model.predict(context, candidates)
    measured = [1 / r.run_secs[0] for r in results]
    assert spearman_of(before, measured) == -1 and spearman_of(after, measured) > -1, (before, after)

    # Loaded for another device (a sibling with AVX2 where this one may have AVX-512, and 4 threads), the rows carry
    # that device's descriptor.
    other = tuned.store.add_device(
        DeviceSpec({"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-linux-gnu", "num-cores": 4}, 4, "cpu", "x")
    )
    loaded, _ = load_predictor(tuned.store, tuned.device_id, for_device=other)
    want = ranker.descriptor(
        Target({"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-linux-gnu", "num-cores": 4}), 4
    )
    np.testing.assert_array_equal(loaded.device, want)
    assert want[1] == 8  # log2 of haswell's 256-bit vectors


@pytest.mark.tvm
def test_a_device_without_a_predictor_takes_one_of_its_class_before_a_bigger_one(sqlite_url, capfd):
    """The starter bundle ships a predictor per class (vector width): an AVX2 device ranks with the AVX2 one although
    the AVX-512 one was trained on more records, and an AVX-512 device with the AVX-512 one. A sibling whose stored
    target LLVM refuses (a crafted row's) is classed as none, and what LLVM says of it never reaches the terminal."""
    from tvm.target import Target

    from registry import hostinfo
    from registry.store.values import PredictorIn
    from registry.tvm_side import ranker
    from registry.tvm_side.predictor import sibling_predictor, to_bytes
    from registry.tvm_side.target import canonical_target

    cpu = lambda mcpu: {"kind": "llvm", "mcpu": mcpu, "mtriple": "x86_64-linux-gnu", "num-cores": 2}  # noqa: E731
    classes = [ranker.device_class(Target(cpu(m))) for m in ("znver3", "icelake-server")]
    assert classes == ["llvm 256-bit", "llvm 512-bit"]
    rng = np.random.default_rng(0)
    described = ranker.descriptor(Target(cpu("haswell")), 1)
    workloads = [
        ([rng.random((2, ranker.FEATURE_WIDTH), dtype=np.float32) for _ in range(6)], rng.random(6) + 0.1, described)
        for _ in range(3)
    ]
    blob = to_bytes(ranker.RankingModel(ranker.fit(workloads, rounds=3), Target(cpu("haswell")), 1))
    store = Store(sqlite_url)
    device = lambda mcpu: store.add_device(  # noqa: E731
        DeviceSpec(canonical_target(cpu(mcpu)), 1, "a cpu", hostinfo.tvm_version())
    )
    avx512, avx2 = device("skylake-avx512"), device("haswell")
    crafted = store.add_device(DeviceSpec(cpu("notacpu\x1b[31mX"), 1, "a cpu", hostinfo.tvm_version()))
    for device_id, records in ((avx512, 10**6), (avx2, 10), (crafted, 10**7)):
        store.save_predictor(PredictorIn(device_id, ranker.KIND, blob, {}, 3, records, hostinfo.tvm_version()))
    for mcpu, expected in (("znver3", avx2), ("icelake-server", avx512)):
        found = sibling_predictor(store, device(mcpu))
        assert found is not None and found[2].startswith(f"{expected}:"), (mcpu, found)
    assert "\x1b" not in capfd.readouterr().err


@pytest.fixture
def with_sibling(tuned, tmp_path):
    """A copy of the tuned registry where an AVX2 sibling device holds the same schedules: device 1's own
    measurements filed again under it (what these tests judge is which rows train, not how well)."""
    import sqlite3

    from tvm.s_tir import meta_schedule as ms
    from tvm.target import Target

    from registry.records.database import RegistryDatabase

    path = tmp_path / "registry.db"
    with sqlite3.connect(tuned.url.removeprefix("sqlite:///")) as source, sqlite3.connect(path) as copy:
        source.backup(copy)  # with what its write-ahead log holds, which a file copy would miss
    store = Store(f"sqlite:///{path}")
    sibling = Target({"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-linux-gnu", "num-cores": 4})
    filed = RegistryDatabase(sibling, store, num_threads=1)
    for r in RegistryDatabase(tuned.target, store, num_threads=1).get_all_tuning_records():
        filed.commit_tuning_record(ms.database.TuningRecord(r.trace, r.workload, r.run_secs, sibling, r.args_info))
    sibling_id = next(d.id for d in store.all_devices() if d.id != tuned.device_id and d.num_threads == 1)
    return SimpleNamespace(url=f"sqlite:///{path}", store=store, device_id=tuned.device_id, sibling_id=sibling_id)


@pytest.mark.tvm
def test_training_on_other_devices_holds_the_held_out_workloads_out_of_each(with_sibling, monkeypatch):
    """``--with-device``: the sibling's programs train too, each with its device's descriptor; the workloads held out
    for the evaluation are held out of the sibling's records as well, and the stored model trains on everything."""
    from registry.tvm_side import predictor

    fits, fit = [], predictor._fit_ranking

    def spy(training, ranks_for):
        fits.append([(s.device_id, sorted(g.workload_id for g in groups)) for s, groups in training])
        return fit(training, ranks_for)

    boosted, boost = [], predictor.ranker.fit

    def spy_boost(queries, **kwargs):
        boosted.append(queries)
        return boost(queries, **kwargs)

    monkeypatch.setattr(predictor, "_fit_ranking", spy)
    monkeypatch.setattr(predictor.ranker, "fit", spy_boost)
    store, device, sibling = with_sibling.store, with_sibling.device_id, with_sibling.sibling_id
    mine = store.ok_record_counts(device)
    assert store.ok_record_counts(sibling) == mine
    model, metrics = predictor.train(store, device, holdout=1 / 3, seed=0, with_devices=[sibling])
    held = sorted(r["workload_id"] for r in metrics["per_workload"])
    partial, final = fits
    assert [d for d, _ in partial] == [device, sibling] and len(held) == 2
    for _, ids in partial:  # the held-out workloads trained on no device's records
        assert ids == sorted(set(mine) - set(held)), (ids, held)
    assert final == [(device, sorted(mine)), (sibling, sorted(mine))]
    assert metrics["workloads"] == N_WORKLOADS and metrics["records"] == 2 * sum(n for _, n in mine.values())
    names = [d.name for d in store.all_devices() if d.id in (device, sibling)]
    assert metrics["trained_on"] == f"{names[0]} + {names[1]} ({metrics['records']} programs)"
    own, other = (predictor.TrainingSource(store, d) for d in (device, sibling))
    described = [tuple(predictor.ranker.descriptor(s.target, s.threads)) for s in (own, other)]
    assert described[0] != described[1] and tuple(model.device) == described[0]  # it ranks for its own device
    assert [collections.Counter(tuple(q[2]) for q in queries) for queries in boosted] == [
        {described[0]: N_WORKLOADS - 2, described[1]: N_WORKLOADS - 2},
        {described[0]: N_WORKLOADS, described[1]: N_WORKLOADS},
    ]  # each workload one query a device, with that device's descriptor

    result = run(with_sibling.url, "predictor", "train", "--device", str(device), "--with-device", str(sibling))
    assert result.exit_code == 0, result.output
    assert f"trained on {names[0]} + {names[1]}" in result.output and "held-out" in result.output
    as_json = run(with_sibling.url, "predictor", "train", "--device", str(device), "--with-device", names[1], "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.output)["trained_on"] == metrics["trained_on"], as_json.output
    listed = run(with_sibling.url, "predictor", "list", "--device", str(device))
    assert listed.exit_code == 0 and f"{names[0]} + {names[1]}" in listed.output, listed.output

    import registry  # the same from Python, by the devices' names, into the registry's file

    trained = registry.train_predictor(with_sibling.url.removeprefix("sqlite:///"), names[0], with_devices=[names[1]])
    assert trained["trained_on"] == metrics["trained_on"] and trained["kind"] == "xgb-rank-v1"
    newest = store.latest_predictor(device)
    assert newest.version == trained["version"] and newest.metrics["held_out"] == trained["held_out"]


@pytest.mark.tvm
def test_training_with_devices_that_cannot_train_together_is_one_line_and_stores_nothing(with_sibling):
    store, device = with_sibling.store, with_sibling.device_id
    empty = store.add_device(DeviceSpec({"kind": "llvm", "num-cores": 8}, 8, "another cpu", "0.27.0"))
    gpu = store.add_device(DeviceSpec({"kind": "cuda", "arch": "sm_90"}, 0, "a gpu", "0.27.0"))
    foreign = store.add_device(DeviceSpec({"kind": "nosuchkind"}, 1, "a crafted row", "0.27.0"))
    before = store.list_predictors()
    for args, code, says in (
        (["--with-device", str(with_sibling.sibling_id), "--kind", "xgb-v2"], 1, "needs kind xgb-rank-v1"),
        (["--with-device", str(device)], 1, "named twice"),
        (["--with-device", str(gpu)], 1, "one kind of target"),
        (["--with-device", str(empty)], 1, "no ok records"),
        (["--with-device", "no-such-device"], 1, "no-such-device"),
        (["--with-device", str(foreign)], 1, "its stored target is not one this TVM takes"),
        (["--seed", "-5"], 2, "'--seed'"),  # numpy's "expected non-negative integer" was an internal error
    ):
        result = run(with_sibling.url, "predictor", "train", "--device", str(device), *args)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == code and len(lines) == 1 and says in lines[0], (args, result.output)
        assert "Traceback" not in result.output
    assert store.list_predictors() == before


@pytest.mark.parametrize(
    "arguments, says",
    [
        ({"with_devices": "2"}, "expected a list of devices"),  # a string is not read one character a device
        ({"with_devices": [2.5]}, "expected an id or a name"),
        ({"device": None}, "expected an id or a name"),
        ({"seed": -1}, "seed -1"),
        ({"seed": None}, "seed None"),  # a held-out share no one could draw again
        ({"seed": "3"}, "seed '3'"),
        ({"holdout": "0.5"}, "holdout '0.5'"),
        ({"holdout": float("nan")}, "holdout nan"),
    ],
)
def test_training_from_python_refuses_arguments_of_the_wrong_type_before_any_work(sqlite_url, arguments, says):
    import registry
    from registry.errors import BadInputError

    store = Store(sqlite_url)
    device = store.add_device(DeviceSpec({"kind": "llvm", "num-cores": 2}, 1, "a cpu", "0.27.0"))
    with pytest.raises(BadInputError, match=re.escape(says)):
        registry.train_predictor(sqlite_url, **{"device": device, **arguments})
    assert store.list_predictors() == []


def spearman_of(a, b) -> float:
    from registry.tvm_side.predictor_scores import spearman

    return spearman(np.asarray(a), np.asarray(b))
