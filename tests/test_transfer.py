"""`registry transfer` end to end with real TVM: a tiny tuned model donates to a sibling with other shapes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.cli.main import cli
from registry.share.log_import import import_logs
from registry.store.sql.models import Model, ModelTask, TuningRecord, Workload
from registry.store.sql.store import Store
from registry.tvm_side import zoo


def transfer(url: str, *args: str):
    result = CliRunner().invoke(cli, ["--db", url, "transfer", *args])
    assert result.exit_code == 0, result.output
    return result


def transfer_json(url: str, *args: str) -> dict:
    out = transfer(url, *args, "--json").stdout
    return json.loads(out[out.index("{") :])


@pytest.fixture
def sibling(tmp_path: Path) -> Path:
    """The tuned tiny model is one 8x64x64 matmul+add; this one is 16x96x48: same operator, other shapes."""
    path = tmp_path / "sibling.onnx"
    onnx.save(zoo.mlp(16, (96, 48), seed=3), path)
    return path


def test_transfer_to_a_sibling_beats_untuned_and_records_its_donor(db_url, tuned_logs, sibling, tmp_path):
    store = Store(db_url)
    import_logs(store, tuned_logs.work_dir, model="tiny")
    out = tmp_path / "sibling.so"

    # --tune-trials 0: what transfer itself found (with tuning, a transfer under half its donor's rate is tuned on)
    began = time.perf_counter()
    first = transfer_json(db_url, str(sibling), "--candidates", "4", "--tune-trials", "0", "-o", str(out))
    wall_s = time.perf_counter() - began
    [task] = first["tasks"]
    assert task["source"] == "transferred", task
    assert 1 <= task["candidates"] <= 4
    # The donor's 16-trial schedule gives 2.3x to 4x over naive loops, run to run (tests/test_tvm_database.py);
    # 2x is what any usable transfer must clear.
    assert task["after_us"] < task["before_us"] / 2, task
    # End to end, a 30-60 µs model also pays the VM's calls: 1.5x and 1.9x were seen where the kernel gained 2x+ (a
    # znver3 VM, 2026-11-25). Compiling without the record would leave about 1x.
    assert first["final_ms"] < first["untuned_ms"] / 1.25, first
    # finding the donors and timing their candidates: part of the command's wall time, and not nothing
    assert 0 < first["search_s"] < wall_s and {"untuned_ms", "final_ms", "tasks"} <= first.keys()
    assert out.stat().st_size > 0

    with Session(store.engine) as s:
        rec = s.execute(select(TuningRecord).where(TuningRecord.source == "transferred")).scalar_one()
        donor = s.get(TuningRecord, rec.donor_record_id)
        assert donor.id == task["donor_record_id"]
        assert donor.source == "imported" and donor.workload_id != rec.workload_id
        assert rec.workload_id == task["workload_id"] and rec.model == "sibling" and rec.ok
        model = s.execute(select(Model).where(Model.name == "sibling")).scalar_one()
        tasks = s.execute(select(ModelTask).where(ModelTask.model_id == model.id)).scalars().all()
        assert [(t.workload_id, t.weight) for t in tasks] == [(task["workload_id"], task["weight"])]
        assert json.loads(model.input_shapes_json) == {"x": [16, 96]}

    second = transfer_json(db_url, str(sibling))
    assert [t["source"] for t in second["tasks"]] == ["exact"]
    assert second["timings"]["measure_s"] == 0  # nothing left to search for
    assert second["final_ms"] < second["untuned_ms"] / 1.25, second  # the same schedule: the same gross bound
    with store.read() as s:  # the exact hit wrote nothing
        transferred = s.execute(select(TuningRecord.id).where(TuningRecord.source == "transferred")).scalars()
        assert transferred.all() == [rec.id]


def test_no_donor_keeps_the_default_schedule_without_fallback_tuning(sqlite_url, sibling):
    result = transfer_json(sqlite_url, str(sibling), "--tune-trials", "0")
    assert [(t["source"], t["candidates"], t["donor"]) for t in result["tasks"]] == [("default", 0, None)]
    with Store(sqlite_url).read() as s:
        assert s.execute(select(TuningRecord)).first() is None
        assert s.execute(select(Workload.task_name)).scalars().all() == ["fused_matmul_add"]


def test_no_donor_tasks_go_to_the_tuning_engine(sqlite_url, sibling):
    result = transfer_json(sqlite_url, str(sibling), "--tune-trials", "8")
    [task] = result["tasks"]
    assert task["source"] == "tuned" and task["measurements"] == 8, task
    assert task["after_us"] < task["before_us"] / 2, task  # 8 trials: typically 3x, sometimes a little less
    assert result["tuning"]["dop"] >= 1 and result["final_ms"] < result["untuned_ms"] / 2
    with Store(sqlite_url).read() as s:
        sources = s.execute(select(TuningRecord.source)).scalars().all()
        assert sources == ["tuned"] * 8


def _registry_of_donors(tmp_path: Path, tuned_logs, name: str, claims: float = 1.0) -> str:
    """A registry holding the tuned tiny model's records, each claiming ``claims`` times the rate it measured."""
    from sqlalchemy import create_engine, update

    url = f"sqlite:///{tmp_path / name}"
    import_logs(Store(url), tuned_logs.work_dir, model="tiny")
    with create_engine(url).begin() as conn:
        conn.execute(update(TuningRecord).values(mean_s=TuningRecord.mean_s / claims))
    return url


def test_a_transfer_far_under_its_donors_rate_is_tuned_further(tmp_path, tuned_logs, sibling):
    """A donor's rate on its own workload is what its schedule is worth on a similar one. Donors that claim 1000x the
    rate they measured leave the transferred schedule at a thousandth of it: the fallback tunes the task (not with
    --retune-below 0), and keeps the transferred record where tuning did not beat it."""
    honest = transfer_json(_registry_of_donors(tmp_path, tuned_logs, "honest.db"), str(sibling), "--tune-trials", "0")
    [task] = honest["tasks"]
    assert task["source"] == "transferred" and 0.02 < task["of_donor_rate"] < 50, task  # the same order

    never = _registry_of_donors(tmp_path, tuned_logs, "never.db", claims=1000.0)
    [task] = transfer_json(never, str(sibling), "--tune-trials", "6", "--retune-below", "0")["tasks"]
    assert task["source"] == "transferred" and task["of_donor_rate"] < 0.01 and task["trials"] == 0, task

    url = _registry_of_donors(tmp_path, tuned_logs, "claims.db", claims=1000.0)
    [task] = transfer_json(url, str(sibling), "--tune-trials", "6")["tasks"]
    assert task["trials"] == 6 and task["of_donor_rate"] < 0.01, task
    assert task["source"] in ("tuned", "transferred") and task["after_us"] < task["before_us"] / 2, task
    with Store(url).read() as s:
        sources = s.execute(select(TuningRecord.source)).scalars().all()
    assert sources.count("tuned") == 6 and sources.count("transferred") == 1, sources


def test_the_donors_rate_counts_only_records_that_were_searched_for():
    """A poor transfer stored earlier (in the same model, say) must not vouch for the next one through its own rate."""
    from registry.similarity.donors import Donor, best_rate
    from registry.store.values import StoredRecord

    def donor(mean_s, flops, source):
        return Donor(StoredRecord(1, 1, "[]", [mean_s], mean_s), 1, "conv", 1.0, True, 1, flops, source)

    assert best_rate([donor(1e-3, 2e6, "tuned"), donor(1e-4, 4e6, "imported"), donor(1e-3, 0.0, "tuned")]) == 4e10
    assert best_rate([donor(1e-3, 2e6, "tuned"), donor(1e-6, 2e6, "transferred")]) == 2e9
    assert best_rate([donor(1e-6, 2e6, "transferred"), donor(None, 2e6, "tuned")]) is None


def test_table_output_names_the_sources_and_the_split(sqlite_url, sibling):
    out = transfer(sqlite_url, str(sibling), "--tune-trials", "0").stdout
    assert "default" in out and "before µs" in out
    assert "end-to-end latency: untuned" in out and "donor search" in out and "compile" in out


def test_dynamic_reshape_imports_once_the_input_shape_is_given(sqlite_url, tmp_path):
    from tvm.relax.frontend.onnx import from_onnx

    path = tmp_path / "exported.onnx"
    onnx.save(zoo.exported_mlp(), path)
    with pytest.raises(Exception, match="Reshape requires the input new shape"):
        from_onnx(zoo.exported_mlp(), shape_dict={"x": [8, 64]})  # what TVM alone makes of it

    missing = CliRunner().invoke(cli, ["--db", sqlite_url, "transfer", str(path)])
    assert missing.exit_code == 1 and "--input-shape x=1,64" in missing.output, missing.output

    result = transfer_json(sqlite_url, str(path), "--input-shape", "x=8,64", "-o", str(tmp_path / "exported.so"))
    assert len(result["tasks"]) >= 1 and not result["errors"]  # what it computes is checked below

    # The folded, compiled model computes what the original ONNX graph computes.
    import numpy as np
    import tvm
    from onnx.reference import ReferenceEvaluator
    from tvm import relax

    x = np.random.default_rng(0).standard_normal((8, 64)).astype("float32")
    (expected,) = ReferenceEvaluator(zoo.exported_mlp()).run(None, {"x": x})
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "exported.so")), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert got.shape == (8, 16, 2) and np.allclose(got, expected, atol=1e-4)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--input-shape", "y=8,64"], "the model's inputs are x"),
        (["--input-shape", "x=8"], "1 dimensions given"),
        (["--input-shape", "x=8,zero"], "expected NAME=D1,D2"),
        (["--input-shape", "x=8,64", "--target", '{"kind": "nope"}'], "not a valid TVM target"),
    ],
)
def test_bad_arguments_give_one_line(sqlite_url, tmp_path, args, fragment):
    path = tmp_path / "exported.onnx"
    onnx.save(zoo.exported_mlp(), path)
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "transfer", str(path), *args])
    assert result.exit_code == 1 and fragment in result.output and "Traceback" not in result.output, result.output


def test_corrupt_and_unsupported_models_give_one_line(sqlite_url, tmp_path):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07garbage")
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "transfer", str(corrupt)])
    assert result.exit_code == 1 and "not a valid ONNX model" in result.output, result.output

    model = zoo.mlp(4, (8, 8))
    model.graph.node[0].op_type = "FancyMatMul"
    model.graph.node[0].domain = ""
    odd = tmp_path / "odd.onnx"
    onnx.save(model, odd)
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "transfer", str(odd)])
    assert result.exit_code == 1 and "FancyMatMul" in result.output, result.output
    with Store(sqlite_url).read() as s:  # nothing was recorded for models that did not import
        assert s.execute(select(Model)).first() is None


def test_threads_are_part_of_the_device(sqlite_url, tuned_logs, sibling):
    """`--threads 2` runs in a fresh process (TVM reads the count once, at start), files its records under a 2-thread
    device, and does not take the sibling's 1-thread record as an exact hit: only as a donor from another device."""
    import subprocess
    import sys

    store = Store(sqlite_url)
    import_logs(store, tuned_logs.work_dir, model="tiny", num_threads=1)
    one = transfer_json(sqlite_url, str(sibling), "--candidates", "2", "--tune-trials", "0")
    assert [t["source"] for t in one["tasks"]] == ["transferred"] and one["device"].endswith("-1t")

    exe = Path(sys.executable).with_name("registry")
    args = [str(exe), "--db", sqlite_url, "transfer", str(sibling), "--json", "--candidates", "2", "--tune-trials", "0"]
    args += ["--threads", "2"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    two = json.loads(done.stdout)
    assert two["threads"] == 2 and two["device"].endswith("-2t")
    assert [(t["source"], t["same_device"]) for t in two["tasks"]] == [("transferred", False)], two["tasks"]
    assert {d.threads for d in store.devices()} == {1, 2}


@pytest.mark.tvm
def test_an_exact_hit_slower_than_the_default_gives_way_to_it(sqlite_url, tmp_path):
    """A stored best that measures slower than the task's default (the default given here: 1 ns, or 1 s) is not what
    compiling should apply: the default is filed as the task's record and the task reported as "default". Where the
    tuning's 4 candidates all lost to the default, the tuning filed it already (a record is stored once): it is then
    the best as it was, at the time the tuning measured."""
    from registry.measure.types import Measurement
    from registry.pipeline.model_run import model_run
    from registry.pipeline.transfer import ModelTransferOptions, _Resolver
    from registry.similarity.index import SimilarityIndex
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    path = tmp_path / "mlp.onnx"
    onnx.save(zoo.mlp(8, (64, 64)), path)
    tuned = CliRunner().invoke(cli, ["--db", sqlite_url, "tune", str(path), "--trials", "4", "--no-predictor", "-q"])
    assert tuned.exit_code == 0, tuned.output
    store = Store(sqlite_url)
    with model_run(store, load_onnx(path, name="mlp"), host_target(), 1, "transferred", None) as run:
        [task] = run.tasks
        default_was_filed = any(_is_default(r) for r in store.top_k(task.workload_id, run.tvm_database.device_id, 100))
        resolver = _Resolver(run, SimilarityIndex(store), ModelTransferOptions())
        slow_default = resolver.resolve(task, Measurement((1.0, 1.0, 1.0)))
        fast_default = resolver.resolve(task, Measurement((1e-9, 1e-9, 1e-9)))
        best = store.top_k(task.workload_id, run.tvm_database.device_id, 1)[0]
    assert slow_default.source == "exact" and slow_default.after_us < 1e6
    assert fast_default.source == "default" and fast_default.after_us == pytest.approx(1e-3)
    assert _is_default(best)
    assert default_was_filed or best.mean_s == pytest.approx(1e-9)


def _softmax(path: Path, shape: list[int]) -> Path:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_only_a_searched_default_at_this_devices_threads_keeps_a_task_on_it():
    """The first best record among the donors counts as "the default was kept" only where a search kept it (not a
    transferred record) at this device's runtime threads (at 8 threads a parallel schedule can beat what 1 kept)."""
    from registry.pipeline.transfer import kept_the_default
    from registry.similarity.donors import Donor
    from registry.store.values import StoredRecord

    default = json.dumps([[["GetSBlock", [], ["root", "main"], ["b0"]]], []])
    scheduled = json.dumps([[["GetSBlock", [], ["root", "main"], ["b0"]], ["Annotate", ["b0", 16], ["x"], []]], []])

    def donor(trace=default, source="tuned", same=False, device=2, rank=1):
        return Donor(StoredRecord(1, 1, trace, [1e-6], 1e-6), 1, "softmax", 1.0, same, rank, 1.0, source, device)

    threads = {1: 1, 2: 1, 3: 8}
    assert kept_the_default([donor()], threads, 1) is not None
    assert kept_the_default([donor(device=3)], threads, 1) is None  # timed at 8 threads, this device runs 1
    assert kept_the_default([donor(device=1, same=True)], threads, 1) is not None
    assert kept_the_default([donor(source="transferred")], threads, 1) is None
    assert kept_the_default([donor(scheduled), donor()], threads, 1) is None  # the first best is a schedule
    assert kept_the_default([donor(rank=2)], threads, 1) is None  # a runner-up says nothing of the best
    assert kept_the_default([donor("not json")], threads, 1) is None
    assert kept_the_default([], threads, 1) is None


def test_a_task_whose_nearest_donor_kept_the_default_is_left_on_it(sqlite_url, tmp_path):
    """A softmax whose nearest stored workload's best record is TVM's default (its tuning found nothing faster, as
    is usual for a softmax on a CPU) stays on its default: no candidate is measured for it (the donor's program is
    the default, timed already) and the fallback does not tune it. Its result says why; the plan line counts it."""
    from registry.pipeline.model_run import model_run
    from registry.pipeline.transfer import ModelTransferOptions, _Resolver
    from registry.similarity.index import SimilarityIndex
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    stored, new = _softmax(tmp_path / "a.onnx", [4, 64]), _softmax(tmp_path / "b.onnx", [8, 48])
    store = Store(sqlite_url)
    with model_run(store, load_onnx(stored, name="a"), host_target(), 1, "transferred", None) as run:
        [task] = run.tasks
        assert _Resolver(run, SimilarityIndex(store), ModelTransferOptions())._keep_default(task, 1.0)
    result = transfer(sqlite_url, str(new), "--tune-trials", "8", "--json")
    [softmax] = json.loads(result.stdout[result.stdout.index("{") :])["tasks"]
    assert softmax["source"] == "default" and softmax["candidates"] == 0 and softmax["trials"] == 0, softmax
    assert softmax["stopped"].startswith("not tuned: its nearest donor"), softmax
    assert "1 kept on TVM's default" in result.stderr and "nothing left to tune" in result.stderr, result.stderr


def _pointwise(path: Path) -> Path:
    """A 1x1 convolution, 128 to 64 channels on 14x14 maps, and its ReLU."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((64, 128, 1, 1)).astype("float32"), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 14, 14])],
        initializer=[weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.tvm
def test_a_1x1_convolution_without_donors_takes_its_matrix_product_schedule(sqlite_url, tmp_path):
    """No donor in the registry, no tuning: a 1x1 convolution's matrix-product schedules (gemm_schedules.py) are its
    candidates; the fastest that computes it beats TVM's default loops and is filed as ``tuned``, with no donor."""
    path = _pointwise(tmp_path / "pointwise.onnx")
    result = transfer(sqlite_url, str(path), "--tune-trials", "0", "--json")
    report = json.loads(result.stdout[result.stdout.index("{") :])
    [conv] = [t for t in report["tasks"] if "conv2d" in t["name"]]
    assert conv["source"] == "tuned" and conv["donor"] is None and conv["candidates"] >= 1, conv
    assert conv["after_us"] < conv["before_us"] / 2, conv  # naive loops against a register-tiled product
    assert "1 scheduled as matrix products" in result.stderr, result.stderr
    with Session(Store(sqlite_url).engine) as s:
        record = s.execute(select(TuningRecord).where(TuningRecord.workload_id == conv["workload_id"])).scalar_one()
    assert record.source == "tuned" and record.donor_record_id is None and record.ok


@pytest.mark.tvm
def test_matrix_product_schedules_that_lost_are_not_handed_to_tuning_as_donors(sqlite_url, tmp_path):
    """Where the default beats every candidate, the task is tuned with the donor schedules transfer tried as seeds;
    the tuning engine adds a 1x1 convolution's matrix-product seeds itself, so transfer hands on no copies of them
    (given twice, they filled the seed places the donors' schedules should have had)."""
    from registry.measure.types import Measurement
    from registry.pipeline.model_run import model_run
    from registry.pipeline.transfer import ModelTransferOptions, _Resolver
    from registry.similarity.index import SimilarityIndex
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    path = _pointwise(tmp_path / "pointwise.onnx")
    store = Store(sqlite_url)
    with model_run(store, load_onnx(path, name="pointwise"), host_target(), 1, "transferred", None) as run:
        [task] = [t for t in run.tasks if "conv2d" in t.name]
        resolver = _Resolver(run, SimilarityIndex(store), ModelTransferOptions())
        result = resolver.resolve(task, Measurement((1e-9, 1e-9, 1e-9)))  # a default no schedule beats
    assert result.source == "default" and result.candidates >= 1, result
    assert resolver.tried.get(task.workload_id, []) == []


def _is_default(record) -> bool:
    """Whether a stored record is a task's default schedule (its trace only looks up the block)."""
    from registry.store.validation import is_default_schedule

    return is_default_schedule(json.loads(record.trace_json)[0])


def test_a_first_transfer_says_what_it_will_tune_and_keeps_to_its_time_budget(sqlite_url, tmp_path):
    """An empty registry: every task is left to tune. One line says so before tuning starts, and for how long; the
    whole command keeps to its budget however many trials a task is allowed."""
    import re
    import time

    path = tmp_path / "mlp3.onnx"
    onnx.save(zoo.mlp(16, (96, 64, 48, 32), seed=5), path)  # three matmul tasks
    start = time.perf_counter()
    result = transfer(sqlite_url, str(path), "--tune-budget", "25s", "--tune-trials", "1000", "--json")
    wall = time.perf_counter() - start
    plan = [line for line in result.stderr.splitlines() if "0 exact, 0 transferred" in line]
    assert len(plan) == 1 and "tuning 3 (3 without a usable donor) for at most" in plan[0], result.stderr
    seconds = int(re.search(r"for at most (\d+) s", plan[0]).group(1))
    # the budget less the transfers' time and what the end will take, measured on the untuned model
    assert 5 <= seconds < 25, plan[0]
    report = json.loads(result.stdout[result.stdout.index("{") :])
    assert any(t["source"] == "tuned" for t in report["tasks"]), report["tasks"]
    assert sum(t["tune_s"] or 0 for t in report["tasks"]) <= seconds + 5, report["tasks"]  # a batch may overrun
    assert sum(t["measurements"] or 0 for t in report["tasks"]) < 3 * 1000
    assert wall < 25 + 10, wall  # gross: the end's reserve is an estimate, and the process starts and exits


@pytest.mark.parametrize("budget, cause", [("0", "tuning is off"), ("5s", "no time is left of --tune-budget")])
def test_transfer_without_time_to_tune_names_what_it_leaves(sqlite_url, sibling, budget, cause):
    result = transfer(sqlite_url, str(sibling), "--tune-budget", budget)
    assert "1 left untuned (1 without a usable donor): " + cause in result.stderr, result.stderr


@pytest.mark.parametrize("seconds_left, later", [(None, 3), (1e6, 3), (-1.0, 1)])
def test_tasks_are_resolved_heaviest_first_with_fewer_candidates_as_the_budget_ends(seconds_left, later):
    """A first transfer of a detector at 416x416 measured every donor candidate of its 49 tasks before its time
    budget was looked at, and ran past it. The heaviest tasks (default time a call) go first; each task gets as many
    candidates as what is left allows at the cost of one so far, and never none: a task left on its default can cost
    a model more than the whole budget. (A stand-in resolver: what is tested is the order and the counts.)"""
    from types import SimpleNamespace

    from registry.measure.types import Measurement
    from registry.pipeline.transfer import _resolve_all
    from registry.report.model_report import TaskResult

    times = {1: 0.5, 2: 4.0, 3: 0.001, 4: 2.0}  # workload id -> its default's seconds; weights 1 but id 4's: 3
    tasks = [SimpleNamespace(name=f"t{w}", workload_id=w, weight=3 if w == 4 else 1) for w in times]
    asked = []

    class Resolver:
        opts = SimpleNamespace(candidates=3)

        def resolve(self, task, default, candidates):
            asked.append((task.workload_id, candidates))
            time.sleep(0.01)
            return TaskResult(task.name, task.weight, task.workload_id, "transferred", default.median_us, 1.0,
                              candidates=candidates)  # fmt: skip

    defaults = {w: Measurement((s,)) for w, s in times.items()}
    deadline = None if seconds_left is None else time.perf_counter() + seconds_left
    run = SimpleNamespace(tasks=tasks)
    results = _resolve_all(run, Resolver(), defaults, deadline, lambda *_: None)
    assert [w for w, _ in asked] == [4, 2, 1, 3]  # 3 x 2.0 s, then 4.0 s, 0.5 s, 1 ms
    assert [c for _, c in asked] == [3] + [later] * 3
    assert [r.workload_id for r in results] == [1, 2, 3, 4]  # the model's order, as the caller zips them
