"""Real TVM runs shared by the tests: a tiny model tuned once per session by plain MetaSchedule."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from registry.tvm_side import zoo
from registry.tvm_side.frontend import LoadedModel, load_onnx

TRIALS = 16


@dataclass
class TunedLogs:
    """A work dir written by plain ``tune_relax`` with TVM's own JSONDatabase, and what it was tuned from."""

    work_dir: Path
    model: LoadedModel
    target: object


def tiny_model(batch: int = 8, n: int = 64) -> LoadedModel:
    """One fused matmul+add task: tunes in seconds, and tuning helps it a lot (naive loops vs tiled code)."""
    return load_onnx(zoo.mlp(batch, (n, n)).SerializeToString(), {"x": [batch, n]}, name=f"tiny-{batch}x{n}")


def model_latency_ms(executable, model: LoadedModel) -> float:
    """A compiled model's end-to-end latency, measured as the registry measures it (in a worker process)."""
    from registry.measure.jobs import time_model
    from registry.measure.measurer import Measurer
    from registry.tvm_side.target import host_target

    with Measurer(host_target()) as measurer:
        timing = time_model(measurer, executable, model.inputs)
    assert timing.ok, timing.error
    return timing.median_s * 1e3


def tune_with_plain_tvm(work_dir: Path, model: LoadedModel, target, database=None, trials: int = TRIALS):
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from registry.measure.builder import PersistentBuilder
    from registry.tvm_side.compat import prepare_tuning

    zmod = relax.get_pipeline("zero")(model.mod)
    prepare_tuning()
    work_dir.mkdir(parents=True, exist_ok=True)
    return ms.relax_integration.tune_relax(
        zmod,
        {},
        target,
        str(work_dir),
        max_trials_global=trials,
        num_trials_per_iter=trials,
        database=database if database is not None else "json",
        seed=1,
        # TVM's LocalBuilder re-imports every tensor intrinsic per batch, past its own timeout on slow machines
        builder=PersistentBuilder(),
    )


def plant_fast_claim(logs: Path, dest: Path, factor: float = 10.0) -> float:
    """A copy of the JSONDatabase in ``logs`` at ``dest`` whose fastest ok record claims 1/``factor`` of its latency
    (what ``registry verify`` must catch). Returns that record's claimed mean, in seconds.

    Its latency is the lower of its claim and what it measures here: plain TVM's claims for a kernel of a microsecond
    run from 0.7 to 14 µs on a busy machine, so a tenth of an inflated claim can be no faster than the kernel."""
    import json
    import shutil

    from registry.store.rows import FAILED_RUN_SECS
    from registry.tvm_side import tvmlog

    shutil.copytree(logs, dest)
    file = dest / tvmlog.RECORD_FILE
    records = [json.loads(line) for line in file.read_text().splitlines()]
    ok = [i for i, r in enumerate(records) if max(r[1][1]) < FAILED_RUN_SECS]
    fastest = min(ok, key=lambda i: sum(records[i][1][1]))
    claimed = records[fastest][1][1]
    workloads = (dest / tvmlog.WORKLOAD_FILE).read_text().splitlines()
    module_json = tvmlog.decode_module(json.loads(workloads[records[fastest][0]])[1])
    latency = min(sum(claimed) / len(claimed), _measured_here(module_json, records[fastest][1][0]))
    secs = records[fastest][1][1] = [latency / factor] * len(claimed)
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    return sum(secs) / len(secs)


def _measured_here(module_json: str, trace: list) -> float:
    """A stored record's mean latency on this machine, timed alone and precisely as verify re-times a suspect."""
    import tvm

    from registry.measure.jobs import kernel_arguments, traced_job
    from registry.measure.measurer import Measurer
    from registry.tvm_side.target import host_target, runtime_threads

    target = host_target()
    job = traced_job(module_json, trace, target, kernel_arguments(tvm.ir.load_json(module_json)))
    with Measurer(target, runtime_threads()) as measurer:
        [m] = measurer.recheck([job])
    assert m.ok, m.error
    return m.mean_us / 1e6


def measured_here(
    store, logs: Path, team: str, keep=lambda i: True, *, host: str | None = None, model: str = "tiny"
) -> int:
    """Write the logs' records into ``store`` as if it had tuned them itself (origin: its own id); returns how many
    were new. ``host``: the host they name (default: TEAM-host)."""
    from registry.share.log_import import checked_workload
    from registry.store.rows import RecordIn
    from registry.tvm_side import tvmlog
    from registry.tvm_side.target import device_spec

    pair = tvmlog.find_logs(logs)[0]
    workloads = [checked_workload(w.where, w.mod_json) for w in tvmlog.read_workloads(pair.workload_file)]
    records = [
        RecordIn(
            workload=workloads[r.workload_index].ident,
            device=device_spec(r.target),
            trace=r.trace,
            run_secs=r.run_secs,
            source="tuned",
            tool_version="test",
            team=team,
            model=model,
            host=host or f"{team}-host",
        )
        for i, r in enumerate(tvmlog.read_records(pair.record_file))
        if keep(i)
    ]
    return store.ingest(workloads, records).records_new


def logged_workloads(logs: Path) -> list:
    """The workloads of a log, checked as an import checks them (``WorkloadIn``)."""
    from registry.share.log_import import checked_workload
    from registry.tvm_side import tvmlog

    pair = tvmlog.find_logs(logs)[0]
    return [checked_workload(w.where, w.mod_json) for w in tvmlog.read_workloads(pair.workload_file)]
