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

    from registry.tvm_side.builder import PersistentBuilder
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
    """A copy of the JSONDatabase in ``logs`` at ``dest`` whose fastest ok record claims 1/``factor`` of its measured
    latency (what ``registry verify`` must catch). Returns that record's claimed mean, in seconds."""
    import json
    import shutil

    from registry import tvmlog
    from registry.store.rows import FAILED_RUN_SECS

    shutil.copytree(logs, dest)
    file = dest / tvmlog.RECORD_FILE
    records = [json.loads(line) for line in file.read_text().splitlines()]
    ok = [i for i, r in enumerate(records) if max(r[1][1]) < FAILED_RUN_SECS]
    fastest = min(ok, key=lambda i: sum(records[i][1][1]))
    secs = records[fastest][1][1] = [s / factor for s in records[fastest][1][1]]
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    return sum(secs) / len(secs)
