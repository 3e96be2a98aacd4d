"""Transfer that measures nothing (``registry transfer --no-measure``): One-Shot Tuner's idea, with the registry's
predictor choosing among its donors' schedules.

For a device this machine cannot run (another CPU, a GPU that is not here), or when the compile's time matters more
than the last 10% of latency. For each task of the model:

1. **exact**: the workload's records on the device, as compiling always uses them;
2. **predicted**: the donors' schedules (the task's own workload on sibling devices, its nearest stored workloads; up
   to ``candidates`` distinct programs, re-samples included: 32 by default, where a measured transfer measures 3) are
   ranked by
   the device's predictor, or a sibling device's until it has one, from their scheduled TIR (no code generation), and
   the one it ranks fastest is **built** for the target; where it does not compile, the next that does is picked;
   a task no donor covers, on a device that is this machine's CPU, gets the predictor's pick among samples of its
   design spaces (One-Shot Tuner's way), once its outputs are checked against the workload's here;
3. **default**: no candidate built (or, for a sampled pick, none checked); TVM's default schedule.

The model is compiled with those schedules and exported. Nothing is timed, and nothing is written to the registry
(except the model and its tasks): a pick has no measured latency, so it is a compile's input, never a record.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
from tvm.target import Target

from registry.errors import BadInputError, RegistryError
from registry.measure.builder import PersistentBuilder
from registry.options import RANKED_CANDIDATES, TRANSFER
from registry.pipeline.clock import Clock
from registry.pipeline.design_space import sample
from registry.pipeline.donor_schedules import DonorSchedules
from registry.pipeline.model_run import Progress, RunTask, extract
from registry.records.database import RegistryDatabase
from registry.report.model_report import ModelReport, TaskResult, Timings
from registry.similarity.index import SimilarityIndex
from registry.store.decode import CorruptRow, device_spec
from registry.store.interface import RegistryStorage
from registry.store.rows import DeviceSpec
from registry.tvm_side.apply_trace import trace_json
from registry.tvm_side.compat import TVM_ERRORS, error_line, prepare_tuning
from registry.tvm_side.compile import compile_model
from registry.tvm_side.frontend import LoadedModel
from registry.tvm_side.output_check import OutputCheck
from registry.tvm_side.predictor import scores_of
from registry.tvm_side.signature import structural_hash
from registry.tvm_side.target import host_target

# Design-space samples the predictor ranks for a task no donor covers, and how many of its first it may check.
SAMPLED = 32
CHECKED = 4


def _is_this_cpu(target: Target) -> bool:
    """Whether code built for ``target`` runs in this process: this machine's CPU, its triple and mcpu, and no
    extra instruction-set features (``mattr``) that its mcpu does not already give."""
    if target.kind.name != "llvm" or target.attrs.get("mattr"):
        return False
    here = host_target()
    return all(str(target.attrs.get(k, "")) == str(here.attrs[k]) for k in ("mtriple", "mcpu"))


def _fails(check: OutputCheck, scheduled) -> bool:
    """Whether a schedule does not compute its workload here, or cannot be run to tell."""
    try:
        return check.problem(scheduled) is not None
    except TVM_ERRORS:
        return True


@dataclass
class PredictOptions:
    candidates: int = RANKED_CANDIDATES  # donor programs ranked per task, at most: only the pick is built
    neighbours: int = TRANSFER.neighbours  # donor workloads considered per task
    output: Path | None = None


@derived_object  # TVM calls get_top_k through the derived object: a plain subclass's override would never be called
class _Picks(RegistryDatabase._cls):
    """The device's records, with the predicted schedules of the tasks that have none."""

    def __init__(self, store: RegistryStorage, device: DeviceSpec) -> None:
        super().__init__(Target(device.target), store, device=device)
        self.picks: dict[str, TuningRecord] = {}

    def pick(self, mod, trace: list, args_info: list) -> None:
        # the latency is unknown: one record per workload, so MetaSchedule's ranking never compares it
        record = TuningRecord.from_json([trace, [1.0], self.device.target, args_info], Workload(mod))
        self.picks[structural_hash(mod)] = record

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        stored = super().get_top_k(workload, top_k)
        if stored:
            return stored
        pick = self.picks.get(structural_hash(workload.mod))
        return [pick] if pick is not None and top_k > 0 else []

    def commit_tuning_record(self, record: TuningRecord) -> None:
        raise RegistryError("a transfer that measures nothing writes no record")


def predict(
    storage: RegistryStorage,
    loaded: LoadedModel,
    device: DeviceSpec,
    device_id: int,
    options: PredictOptions | None = None,
    progress: Progress = lambda _done, _total, _what: None,
    import_s: float = 0.0,
) -> ModelReport:
    """Compile ``loaded`` for ``device`` (a registry device, run here or not) with its records and the predictor's
    picks among the donors' schedules of the rest; see the module docstring."""
    opts = options or PredictOptions()
    target = Target(device.target)
    clock = Clock(Timings(import_s=import_s))
    with clock("import"):
        tasks = extract(storage, loaded, target)
    model, version, source = _predictor(storage, device_id)
    prepare_tuning(target.kind.name)
    with clock("donors"):
        index = SimilarityIndex(storage)
        index.load()
    chooser = _Chooser(_Picks(storage, device), DonorSchedules(storage, target), index, model, device_id, opts, clock)
    chooser.checks_here = _is_this_cpu(target)
    results = []
    try:
        for i, task in enumerate(tasks):
            progress(i, len(tasks), task.name)
            results.append(chooser.resolve(task))
    finally:
        chooser.builder.shutdown()
    progress(len(tasks), len(tasks), "compiling")
    with clock("compile"):
        _compile_and_export(chooser.database, loaded, target, opts.output)
    whose = f" of sibling device {source}" if source else ""
    return ModelReport(
        model=loaded.name,
        device=device.name,
        threads=device.num_threads,
        untuned_ms=None,
        final_ms=None,
        tasks=results,
        timings=clock.timings,
        output=str(opts.output) if opts.output is not None else None,
        tuning={
            "predictor_version": version,
            "predictor_from": source,
            "summary": f"no measurement: predictor v{version}{whose} chose among the donors' schedules (or, for a "
            "task without donors, samples of its design spaces), the pick built",
        },
        errors=["not measured (--no-measure): time the library with TVM, on the device"],
        device_id=device_id,
        sha256=loaded.sha256,
    )


def _predictor(storage: RegistryStorage, device_id: int) -> tuple[object, int, str | None]:
    """The device's predictor, else a sibling device's: (cost model, version, the sibling's name or None)."""
    from registry.tvm_side.predictor import predictor_for

    found = predictor_for(storage, device_id)
    if found is not None:
        return found.model, found.version, found.sibling
    raise BadInputError(
        f"device {device_id} has no predictor, nor has any sibling device: `registry predictor train --device "
        f"{device_id}` trains one on its records (--no-measure lets it choose the schedules)"
    )


def _compile_and_export(database: _Picks, loaded: LoadedModel, target: Target, output: Path | None) -> None:
    try:
        exe = compile_model(database, loaded.mod, target, loaded.exact_math)
    except TVM_ERRORS as e:
        raise RegistryError(f"{loaded.name}: compiling the model failed: {error_line(e)}") from None
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        exe.export_library(str(output))


@dataclass
class _Chooser:
    """Resolves one task at a time: its exact records, else the predictor's pick among its donors' schedules that
    build, else its default schedule."""

    database: _Picks
    schedules: DonorSchedules
    index: SimilarityIndex
    model: object  # the predictor's cost model
    device_id: int
    opts: PredictOptions
    clock: Clock
    builder: PersistentBuilder = field(default_factory=PersistentBuilder)
    checks_here: bool = False  # the device is this machine's CPU: a sampled schedule's outputs can be checked here

    def resolve(self, task: RunTask) -> TaskResult:
        result = TaskResult(task.name, task.weight, task.workload_id, "default", None, None)
        if self.database.store.top_k(task.workload_id, self.device_id, 1):
            result.source = "exact"
            return result
        with self.clock("donors"):
            donors = self.schedules.find(self.index, task, self.device_id, self.opts.neighbours)
            picked = self.schedules.distinct(task.mod, donors, self.opts.candidates, resample=self.opts.candidates)
        if not picked:
            return self._sampled(task, result) if self.checks_here else result
        with self.clock("search"):
            scores = scores_of(self.model, task.mod, self.database.target, task.name, [sch for _, sch in picked])
        result.candidates = len(picked)
        chosen = self._first_that_builds([picked[i] for i in sorted(range(len(picked)), key=lambda i: -scores[i])])
        if chosen is None:
            return result
        donor, sch = chosen
        self._pick(task, sch, result)
        result.donor = f"{donor.task_name}#{donor.workload_id}"
        result.donor_record_id, result.distance = donor.record.id, donor.distance
        result.same_device = donor.same_device
        return result

    def _sampled(self, task: RunTask, result: TaskResult) -> TaskResult:
        """A task no donor covers: the predictor's pick among ``SAMPLED`` samples of its design spaces (One-Shot
        Tuner's way), the first of its top ``CHECKED`` that builds and computes what the workload computes (a random
        schedule was never checked by anyone: ``output_check``), else TVM's default."""
        target = self.database.target
        with self.clock("search"):
            try:
                sampled = [c.sch for c, _ in sample(task.mod, target, task.name, SAMPLED, seed=0)]
                scores = scores_of(self.model, task.mod, target, task.name, sampled) if sampled else []
            except TVM_ERRORS:  # no design space, or sampling it failed: TVM's default
                return result
        result.candidates = len(sampled)
        check = OutputCheck(task.mod, target)
        for i in sorted(range(len(sampled)), key=lambda i: -scores[i])[:CHECKED]:
            built = self._first_that_builds([(None, sampled[i])])
            with self.clock("search"):
                wrong = built is None or _fails(check, sampled[i].mod)
            if not wrong:
                self._pick(task, sampled[i], result)
                return result
        return result

    def _pick(self, task: RunTask, sch, result: TaskResult) -> None:
        """``sch`` becomes the task's schedule in the compile, and the task's source "predicted"."""
        args = ArgInfo.from_prim_func(next(iter(task.mod.functions.values())))
        self.database.pick(task.mod, trace_json(sch), [a.as_json() for a in args])
        result.source = "predicted"

    def _first_that_builds(self, ranked: list):
        """The highest-ranked (donor, schedule) pair whose schedule builds for the target (a schedule that does not
        is never picked), or None. The predictor ranks scheduled TIR, which needs no code generation, so only the
        pick is built, and the others only when it does not build."""
        for batch in (ranked[:1], ranked[1:]):
            with self.clock("measure"):  # building: what a measured transfer would spend before timing
                built = self.builder.build([BuilderInput(sch.mod, self.database.target) for _, sch in batch])
                for b in built:
                    if b.artifact_path:
                        shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
            for pair, b in zip(batch, built, strict=True):
                if not b.error_msg:
                    return pair
        return None


def device_of(storage: RegistryStorage, selector: str) -> tuple[DeviceSpec, int]:
    """A registry device by ``--device`` selector, as the spec its records are filed under, and its id. Its TVM
    release must be this one: traces and a predictor's features are a release's own."""
    from registry import hostinfo

    row = storage.resolve_one_device(selector)
    if row.tvm_version != hostinfo.tvm_version():
        raise BadInputError(
            f"device {row.id}:{row.name} was measured with TVM {row.tvm_version}, this is TVM "
            f"{hostinfo.tvm_version()}: its schedules and predictor are not this release's"
        )
    try:
        return device_spec(row), row.id
    except CorruptRow:
        raise BadInputError(f"device {row.id}:{row.name}'s stored target is not JSON: choose another") from None
