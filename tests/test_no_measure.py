"""`registry transfer --no-measure`: the predictor chooses among the donors' schedules that build; nothing is timed,
nothing is written, and the library it exports computes what the untuned model computes. Real TVM builds; the
"other device" is an AVX2 CPU (mcpu=haswell), whose code this machine can also run to check the result."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import func, select

from registry.cli.main import cli
from registry.store.sql.models import TuningRecord
from registry.store.sql.store import Store
from registry.tvm_side import zoo


def haswell() -> str:
    """An AVX2 CPU as a target, with this machine's triple: its code runs here too."""
    from registry.tvm_side.target import host_target

    return json.dumps({"kind": "llvm", "mcpu": "haswell", "mtriple": str(host_target().attrs["mtriple"]),
                       "num-cores": 1})  # fmt: skip


def _ok(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _records(url: str) -> int:
    with Store(url).read() as s:
        return s.execute(select(func.count()).select_from(TuningRecord)).scalar()


@pytest.fixture(scope="module")
def _tuned_for_haswell(tmp_path_factory) -> tuple[Path, int]:
    """A registry holding an MLP tuned for another CPU (haswell) and that device's predictor: (file, device id).
    Made once for the module (a tuning run and a training); each test gets a copy (``other_device``)."""
    folder = tmp_path_factory.mktemp("haswell")
    db, mlp = folder / "registry.db", folder / "mlp.onnx"
    onnx.save(zoo.mlp(16, (128, 256, 128)), mlp)
    url = f"sqlite:///{db}"
    with pytest.MonkeyPatch.context() as env:  # made before the per-test home (conftest): one of its own
        env.setenv("REGISTRY_HOME", str(folder / "home"))
        _ok("--db", url, "tune", str(mlp), "--target", haswell(), "--trials", "24", "--no-predictor", "--json")
        [device] = [d for d in Store(url).all_devices() if "haswell" in d.target_json]
        _ok("--db", url, "predictor", "train", "--device", str(device.id), "--holdout", "0")
    return db, device.id


@pytest.fixture
def other_device(_tuned_for_haswell, tmp_path: Path) -> tuple[str, int]:
    """A copy of that registry, for one test to write to: (url, device id)."""
    db, device = _tuned_for_haswell
    copy = tmp_path / "registry.db"
    with closing(sqlite3.connect(db)) as source, closing(sqlite3.connect(copy)) as target:
        source.backup(target)  # through SQLite, so that what its write-ahead log holds is copied too
    return f"sqlite:///{copy}", device


def _outputs(library: Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs.values()]).numpy()


@pytest.mark.tvm
def test_no_measure_compiles_the_predictors_picks_for_another_device_and_writes_nothing(other_device, tmp_path):
    url, device = other_device
    sibling = tmp_path / "sibling.onnx"
    onnx.save(zoo.mlp(16, (128, 192, 64), seed=3), sibling)
    before = _records(url)
    library = tmp_path / "sibling.so"
    out = _ok("--db", url, "transfer", str(sibling), "--no-measure", "--device", str(device), "-o", str(library),
              "--json")  # fmt: skip
    report = json.loads(out[out.index("{") :])
    assert _records(url) == before  # nothing measured, nothing written
    assert report["final_ms"] is None and report["tuning"]["predictor_version"] == 1
    assert {t["source"] for t in report["tasks"]} == {"predicted"}, report["tasks"]
    assert all(t["donor"] and t["candidates"] >= 1 for t in report["tasks"])
    # ranking costs no build, so it ranks a wider pool than the 3 a measured transfer measures (RANKED_CANDIDATES)
    assert max(t["candidates"] for t in report["tasks"]) > 3, report["tasks"]
    assert report["timings"]["measure_s"] > 0  # the candidates were built

    # the library computes the model: against the untuned build of the same model
    plain = tmp_path / "plain.so"
    _ok("--db", f"sqlite:///{tmp_path / 'empty.db'}", "transfer", str(sibling), "--target", haswell(),
        "--tune-trials", "0", "-o", str(plain))  # fmt: skip
    x = {"x": np.random.default_rng(0).standard_normal((16, 128)).astype("float32")}
    np.testing.assert_allclose(_outputs(library, x), _outputs(plain, x), rtol=1e-4, atol=1e-4)


@pytest.mark.tvm
def test_no_measure_takes_a_sibling_devices_predictor_and_refuses_without_any(other_device, tmp_path):
    url, _ = other_device
    sibling = tmp_path / "sibling.onnx"
    onnx.save(zoo.mlp(16, (128, 192, 64), seed=3), sibling)
    # this machine: no predictor of its own; --candidates bounds what the predictor ranks
    out = _ok("--db", url, "transfer", str(sibling), "--no-measure", "--candidates", "2", "--json")
    report = json.loads(out[out.index("{") :])
    assert report["tuning"]["predictor_from"] and "haswell" in report["tuning"]["predictor_from"]
    assert {t["source"] for t in report["tasks"]} == {"predicted"}
    # (a task no donor covers ranks design-space samples instead, however many --candidates says)
    assert all(1 <= t["candidates"] <= 2 for t in report["tasks"] if t["donor"]), report["tasks"]

    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    result = CliRunner().invoke(cli, ["--db", empty, "transfer", str(sibling), "--no-measure"])
    assert result.exit_code == 1 and "registry predictor train --device" in result.stderr, result.output
    assert result.stderr.count("\n") == 1


def test_device_applies_only_without_measurement(sqlite_url, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(zoo.mlp(4, (8, 8)), model)
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "transfer", str(model), "--device", "1"])
    assert result.exit_code == 1 and "--device applies with --no-measure" in result.stderr, result.output


@pytest.mark.tvm
def test_a_pick_is_what_tvm_reads_from_the_database(other_device, tmp_path):
    """TVM asks the database through its C++ object: an override that only Python could see would be skipped, and
    the library would be built with the default schedules (it computes the same, so only this shows it)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from registry.pipeline.model_run import extract
    from registry.pipeline.predicted import _Picks, device_of
    from registry.tvm_side.apply_trace import trace_json
    from registry.tvm_side.frontend import load_onnx

    url, device = other_device
    store = Store(url)
    spec, _ = device_of(store, str(device))
    database = _Picks(store, spec)
    sibling = zoo.mlp(16, (128, 192, 64), seed=3).SerializeToString()
    [task, *_] = extract(store, load_onnx(sibling, name="sibling"), database.target)
    context = ms.TuneContext(mod=task.mod, target=database.target, space_generator="post-order-apply")
    sch = context.generate_design_space()[0]
    assert database.query_tuning_record(task.mod, database.target, "main") is None  # no record of it on the device
    args = [a.as_json() for a in ArgInfo.from_prim_func(next(iter(task.mod.functions.values())))]
    database.pick(task.mod, trace_json(sch), args)
    found = database.query_tuning_record(task.mod, database.target, "main")
    assert found is not None and [float(s) for s in found.run_secs] == [1.0]


@pytest.mark.tvm
def test_a_measured_transfer_ranks_the_donors_with_the_predictor_and_says_so(other_device, tmp_path):
    url, device_id = other_device
    model = tmp_path / "mlp2.onnx"
    onnx.save(zoo.mlp(16, (128, 192, 128)), model)
    args = ("--db", url, "transfer", str(model), "--target", haswell(), "--tune-trials", "0")
    report = json.loads(_ok(*args, "--json"))
    # trained with --holdout 0, it was never judged: it earns no trust, and each task measures what it would without
    want = {"version": 1, "sibling": None, "trained_on": None, "top1": None, "unseen_top1": {}, "measured": 3}
    assert report["ranked_by"] == want, report["ranked_by"]
    transferred = [t for t in report["tasks"] if t["source"] == "transferred"]
    assert transferred and all(1 <= t["candidates"] <= 3 for t in transferred), report["tasks"]
    text = _ok(*args)
    assert "donor schedules ranked by predictor v1 (never judged): up to 3 measured a task" in text


def test_the_report_names_the_predictor_and_its_scores_on_devices_it_never_trained_on():
    from registry.report.model_report import ModelReport, summary_lines

    report = ModelReport("m", "dev", 1, 1.0, 0.5, [])
    unseen = {"llvm-skylake-2c-1t": 0.78, "not a score": "0.99"}
    report.ranked_by = {"version": 2, "sibling": "2:llvm-haswell-2c-1t", "trained_on": "a + b (9 programs)",
                        "top1": 0.74, "unseen_top1": unseen, "measured": 3}  # fmt: skip
    [line] = [x for x in summary_lines(report) if x.startswith("donor schedules")]
    assert line == (
        "donor schedules ranked by predictor v2 of sibling device 2:llvm-haswell-2c-1t, trained on a + b (9 programs) "
        "(held-out top-1 0.74; on devices it never trained on: llvm-skylake-2c-1t 0.78): up to 3 measured a task"
    )


def test_a_predictor_earns_fewer_measurements_with_its_held_out_score():
    from registry.tvm_side.predictor import CONFIDENT, LoadedPredictor

    def warranted(metrics: dict) -> int:
        return LoadedPredictor(None, 1, metrics).warranted(3)

    assert warranted({"held_out": {"top1": CONFIDENT}}) == 1
    assert warranted({"held_out": {"top1": CONFIDENT - 0.01}}) == 3
    # judged on another device's programs, its score says nothing of this one's
    assert warranted({"held_out": {"top1": 0.99}, "trained_on": "llvm-znver4-2c-1t (20000 programs)"}) == 3
    assert LoadedPredictor(None, 1, {"held_out": {"top1": 0.99}}, sibling="2:other").warranted(3) == 3
    assert warranted({}) == 3 and warranted({"held_out": {"top1": "0.99"}}) == 3  # judged on nothing, or not a number


def _two_convolutions(path: Path) -> Path:
    """Two 3x3 convolutions with their activations: two tasks that only design-space samples can schedule (a 1x1
    convolution would take the matrix-product schedules instead)."""
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(shape).astype("float32") for shape in [(8, 3, 3, 3), (8, 8, 3, 3)]]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_convolutions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializer=[numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.tvm
def test_no_measure_picks_among_design_space_samples_where_no_donor_applies(other_device, tmp_path):
    """This machine's device, a CNN while the registry holds only an MLP's records: its convolutions have no donor, so
    each gets the predictor's pick among samples of its design spaces, checked here against the workload's outputs
    first."""
    url, _ = other_device
    cnn = _two_convolutions(tmp_path / "cnn.onnx")
    library = tmp_path / "cnn.so"
    out = _ok("--db", url, "transfer", str(cnn), "--no-measure", "-o", str(library), "--json")
    report = json.loads(out[out.index("{") :])
    sampled = [t for t in report["tasks"] if t["source"] == "predicted" and t["donor"] is None]
    convolutions = [t for t in sampled if "conv2d" in t["name"]]
    assert convolutions and all(t["candidates"] > 1 for t in convolutions), report["tasks"]

    plain = tmp_path / "plain.so"
    _ok("--db", f"sqlite:///{tmp_path / 'empty.db'}", "transfer", str(cnn), "--tune-trials", "0", "-o", str(plain))
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")}
    np.testing.assert_allclose(_outputs(library, x), _outputs(plain, x), rtol=1e-4, atol=1e-4)
