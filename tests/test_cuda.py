"""CUDA without a GPU: targets, GPU device identity, the shared H100 log imported, looked up and exported by its
device, CUDA kernels built here (nvcc is on CI's machines), and a one-line refusal to measure where no GPU is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tvm
from click.testing import CliRunner
from tvm.target import Target

from registry import hostinfo
from registry.cli.main import cli
from registry.errors import BadInputError
from registry.store.rows import DeviceSpec
from registry.tvm_side import tvmlog
from registry.tvm_side.target import target_from_option
from tests.shared_data import H100_LOG

pytestmark = pytest.mark.tvm

H100 = "NVIDIA H100 80GB HBM3"
NO_GPU = not tvm.cuda(0).exist
needs_log = pytest.mark.skipif(not H100_LOG.exists(), reason=f"{H100_LOG} (the shared CUDA log) is not here")


def test_a_cuda_target_from_json_and_from_the_gpu_present():
    target = target_from_option('{"kind": "cuda", "arch": "sm_90"}')
    assert target.kind.name == "cuda" and str(target.attrs["arch"]) == "sm_90"
    if NO_GPU:
        with pytest.raises(BadInputError, match="no CUDA GPU"):
            target_from_option("cuda")
    else:
        assert target_from_option("cuda").kind.name == "cuda"


def test_a_gpu_device_is_its_gpu_driver_and_cuda_not_a_thread_count():
    text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder)"
    assert hostinfo.nvidia_driver(text) == "580.65.06"
    model = hostinfo.gpu_identity(H100, "580.65.06", "13.0")
    assert model == f"{H100} (driver 580.65.06, CUDA 13.0)"
    h100 = DeviceSpec({"kind": "cuda", "arch": "sm_90"}, 0, model, "0.27.0")
    other_driver = DeviceSpec(
        {"kind": "cuda", "arch": "sm_90"}, 0, hostinfo.gpu_identity(H100, "590.1", "13.0"), "0.27.0"
    )
    assert h100.name == "cuda-sm_90-h100" and h100.is_gpu
    assert h100.key != other_driver.key  # records never mix GPUs, drivers or CUDA versions


@needs_log
def test_the_h100_log_imports_under_its_gpu_and_exports_by_device(sqlite_url, tmp_path):
    logs = tmp_path / "h100"
    shutil.copytree(H100_LOG, logs)
    runner = CliRunner()
    if NO_GPU:  # this CPU's name is never stamped on GPU records: the GPU must be named
        refused = runner.invoke(cli, ["--db", sqlite_url, "import", str(logs)])
        assert refused.exit_code == 1 and "--host-model" in refused.output
    # Named, as it was measured: on a machine with a GPU too (unnamed, the records would go to this machine's GPU,
    # whose driver and CUDA release make it another device than the log's).
    done = runner.invoke(cli, ["--db", sqlite_url, "import", str(logs), "--host-model", H100])
    assert done.exit_code == 0, done.output
    devices = runner.invoke(cli, ["--db", sqlite_url, "devices", "--json"])
    [device] = json.loads(devices.stdout)["rows"]
    assert device["name"] == "cuda-sm_90-h100" and device["host_model"] == H100 and device["threads"] == 0
    found = runner.invoke(cli, ["--db", sqlite_url, "lookup", "--device", "cuda-sm_90-h100", "--json"])
    ok = {r.workload_index for r in tvmlog.read_records(logs / tvmlog.RECORD_FILE) if r.run_secs[0] < 1}
    assert (
        found.exit_code == 0 and len(json.loads(found.stdout)["rows"]) == len(ok) >= 13
    )  # its workloads with an ok record
    out = tmp_path / "exported"
    exported = runner.invoke(cli, ["--db", sqlite_url, "export", "-o", str(out), "--device", "cuda-sm_90-h100"])
    assert exported.exit_code == 0, exported.output
    from tvm.s_tir import meta_schedule as ms

    records = ms.database.JSONDatabase(work_dir=str(out)).get_all_tuning_records()
    assert len(records) >= 250 and all(r.target.kind.name == "cuda" for r in records)


@needs_log
def test_cuda_kernels_build_here_tuned_and_default():
    """The log's schedules, and DLight's default for a workload, built for the H100's target by the builder pool."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from registry.measure.builder import PersistentBuilder
    from registry.tvm_side.apply_trace import as_stored
    from registry.tvm_side.compat import load_tensor_intrinsics
    from registry.tvm_side.defaults import default_schedule

    workloads = tvmlog.read_workloads(H100_LOG / tvmlog.WORKLOAD_FILE)
    records = [r for r in tvmlog.read_records(H100_LOG / tvmlog.RECORD_FILE) if r.run_secs and max(r.run_secs) < 1]
    target = Target(records[0].target)
    load_tensor_intrinsics("cuda")
    mods = []
    for r in records[::90]:  # 3 of the log's 254 (each CUDA build takes 3-6 s of this test's time)
        sch = as_stored(tvm.ir.load_json(workloads[r.workload_index].mod_json), r.trace)
        assert sch is not None
        mods.append(sch.mod)
    mods.append(default_schedule(tvm.ir.load_json(workloads[0].mod_json), target))
    builder = PersistentBuilder()
    try:
        built = builder.build([BuilderInput(m, target) for m in mods])
    finally:
        builder.shutdown()
    assert all(b.error_msg is None and Path(b.artifact_path).stat().st_size > 0 for b in built), built


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
def test_measuring_for_cuda_without_a_gpu_is_one_line(sqlite_url, tmp_path):
    import onnx

    from registry.tvm_side import zoo

    model = tmp_path / "mlp.onnx"
    onnx.save(zoo.mlp(), model)
    result = CliRunner().invoke(
        cli, ["--db", sqlite_url, "transfer", str(model), "--target", '{"kind": "cuda", "arch": "sm_90"}']
    )
    assert result.exit_code == 1 and "no cuda device" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def _h100_description(**details):
    """What a measuring worker on the H100 of ../shared/TVM_NOTES.md reported (worker.describe)."""
    from registry.measure.types import DeviceDescription

    driver, cuda = "580.65.06", "13.0"
    return DeviceDescription(
        kind="cuda",
        model=hostinfo.gpu_identity(H100, driver, cuda),
        threads=0,
        tvm_version="0.27.0",
        details={"compute_version": "9.0", "driver": driver, "cuda": cuda, **details},
    )


def test_the_device_a_recorded_gpu_description_files_records_under():
    from registry.tvm_side.target import canonical_target

    desc = _h100_description()
    spec = DeviceSpec(canonical_target({"kind": "cuda", "arch": "sm_90"}), desc.threads, desc.model, desc.tvm_version)
    assert spec.name == "cuda-sm_90-h100" and spec.num_threads == 0
    assert "driver 580.65.06" in spec.host_model and "CUDA 13.0" in spec.host_model


def test_a_target_for_an_arch_the_gpu_does_not_have_is_refused_in_one_line():
    from registry.measure.measurer import target_mismatch

    desc = _h100_description()
    assert target_mismatch(Target({"kind": "cuda", "arch": "sm_90"}), desc, "this machine") is None
    problem = target_mismatch(Target({"kind": "cuda", "arch": "sm_80"}), desc, "this machine")
    assert problem is not None and "sm_80" in problem and "sm_90" in problem and "\n" not in problem


def test_a_python_database_for_a_gpu_this_machine_lacks_names_it(sqlite_url):
    import registry

    identity = hostinfo.gpu_identity(H100, "580.65.06", "13.0")
    db = registry.database({"kind": "cuda", "arch": "sm_90"}, sqlite_url, host_model=identity)
    assert db.device.name == "cuda-sm_90-h100" and db.device.host_model == identity
    assert db.target.kind.name == "cuda"
    if NO_GPU:  # without the GPU and without its name, nothing is guessed
        with pytest.raises(BadInputError, match="host-model"):
            registry.database({"kind": "cuda", "arch": "sm_90"}, sqlite_url)
