"""The steps every per-model command shares (``registry transfer``, ``registry tune``), one job per function:

- **extraction**: the model's tasks, recorded in the registry (``extract``);
- **the measurer's lifecycle**: started before the tasks are extracted (it says which device this is), stopped when
  the command ends (``model_runs``);
- **the budget's reserve**: what a time budget keeps back for the end (``finishing_s``);
- **the compile and the report**: the model compiled with the registry, timed against the untuned build (``finish``).

Wall time goes to the report's parts through the run's ``Clock`` (``registry.pipeline.clock``), passed explicitly.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from registry import hostinfo
from registry.errors import BadInputError, RegistryError
from registry.measure.jobs import before_and_after, kernel_arguments, model_job
from registry.measure.measurer import Measurer
from registry.measure.tracker import Tracker
from registry.measure.types import UNTUNED, Measurement, ModelJob
from registry.pipeline.clock import Clock
from registry.records.database import RegistryDatabase
from registry.report.model_report import ModelReport, TaskResult, Timings
from registry.store.interface import RegistryStorage
from registry.store.rows import DeviceSpec, ModelIn, RecordIn, Signature, WorkloadIn
from registry.tvm_side.compat import TVM_ERRORS, error_line
from registry.tvm_side.compile import compile_model, plain_module, task_module
from registry.tvm_side.defaults import default_schedule, default_trace
from registry.tvm_side.frontend import LoadedModel
from registry.tvm_side.signature import workload_in

# Progress: (steps done, steps in all, what is happening now).
Progress = Callable[[int, int, str], None]


def say(progress: Progress, text: str) -> None:
    """A line the user must read (what a long job is about to do): the progress's own ``note`` where it has one
    (the CLI's prints it at once), else as a progress message."""
    note = getattr(progress, "note", None)
    if note is not None:
        note(text)
    else:
        progress(0, 0, text)


@dataclass
class RunTask:
    """A task of the model being tuned or transferred (see the glossary): its workload as the registry stores it."""

    name: str
    weight: int
    mod: IRModule
    ident: tuple[str, str]  # (structural hash, module equality), as the registry keys workloads
    workload_id: int
    signature: Signature
    arguments: tuple  # (ArgInfo JSON, bounds of the integer arguments): what every schedule of it is timed on


@dataclass
class Where:
    """Where a per-model command measures: this machine, or the servers behind an RPC tracker."""

    rpc: Tracker | None = None
    dop: int | None = None  # kernels measured at once; None: calibrated (here) or one per free server (RPC)
    verbose: bool = False  # show the workers' own output (TVM's warnings and errors)


def extract(storage: RegistryStorage, loaded: LoadedModel, target: Target) -> list[RunTask]:
    """The model's tuning tasks, recorded in the registry with their weights.

    Each task's module is the one the registry stores for its workload, which another model may have stored first.
    The structural hash that keys workloads ignores block names, and traces name the blocks they schedule: a trace
    made on this model's copy (blocks "lv9", "lv9_reindex") would not replay on a stored copy whose blocks are
    "matmul". Tuned and transferred on the stored module, every record replays on the workload it is filed under.
    """
    extracted = ms.relax_integration.extract_tasks(task_module(loaded.mod, target, loaded.exact_math), target)
    workloads = [workload_in(t.dispatched[0], task_name=t.task_name) for t in extracted]
    storage.save_model(
        ModelIn(
            loaded.name,
            loaded.sha256,
            loaded.input_shapes,
            [(w, t.task_name, int(t.weight)) for w, t in zip(workloads, extracted, strict=True)],
            plain_tasks(loaded, target, {w.ident for w in workloads}),
        )
    )
    ids = storage.workload_ids([w.ident for w in workloads])
    stored = storage.workloads_by_id(sorted(set(ids.values())))
    tasks = []
    for w, t in zip(workloads, extracted, strict=True):
        wid = ids[w.ident]
        # (a stored copy that cannot be read is left out with a warning; the registry's write door then refuses
        # the task's records, and the task keeps its own module)
        same = wid not in stored or stored[wid].mod_json == w.mod_json
        mod = t.dispatched[0] if same else tvm.ir.load_json(stored[wid].mod_json)
        tasks.append(RunTask(t.task_name, int(t.weight), mod, w.ident, wid, w.signature, kernel_arguments(mod)))
    return tasks


def plain_tasks(loaded: LoadedModel, target: Target, ours: set) -> list[tuple[WorkloadIn, str, int]]:
    """The model's kernels as plain TVM extracts them, those that differ from the registry's own (``ours``): what
    ``registry export -o`` gives plain ``compile_relax`` records for (``registry.share.plain_export``)."""
    plain = plain_module(loaded.mod, target)
    if plain is None:
        return []
    found = []
    for t in ms.relax_integration.extract_tasks(plain, target):
        w = workload_in(t.dispatched[0], task_name=t.task_name)
        if w.ident not in ours:
            found.append((w, t.task_name, int(t.weight)))
    return found


@dataclass
class ModelRun:
    """One per-model command's run: the model's tasks, what measures them, and the TVM database (the registry's view
    for the measurer's device) that files their records."""

    storage: RegistryStorage
    loaded: LoadedModel
    target: Target
    clock: Clock
    tasks: list[RunTask]
    measurer: Measurer
    tvm_database: RegistryDatabase

    def predictor(self):
        """The device's predictor, else a sibling device's (``predictor.predictor_for``), loaded once a run (a
        transfer ranks with it, then its fallback tuning does): None when neither has one."""
        if not hasattr(self, "_predictor"):
            from registry.tvm_side.predictor import predictor_for

            self._predictor = predictor_for(self.storage, self.tvm_database.device_id)
        return self._predictor

    def tvm_database_for(self, tasks: list[RunTask], source: str, team: str | None) -> RegistryDatabase:
        """Another view of the registry for this run's device, filing records as ``source``."""
        return registry_database(self.storage, self.measurer.device, tasks, source, team, self.loaded.name)


@contextlib.contextmanager
def model_run(
    storage: RegistryStorage,
    loaded: LoadedModel,
    target: Target,
    threads: int | None,
    source: str,
    team: str | None,
    import_s: float = 0.0,
    where: Where | None = None,
) -> Iterator[ModelRun]:
    """What every per-model command does first: start the measurer (which says which device this is), start the
    clock, extract and record the tasks, open the TVM database. The measurer's workers stop at the end."""
    with model_runs(storage, [loaded], target, threads, source, team, import_s, where) as runs:
        yield runs[0]


@contextlib.contextmanager
def model_runs(
    storage: RegistryStorage,
    models: list[LoadedModel],
    target: Target,
    threads: int | None,
    source: str,
    team: str | None,
    import_s: float = 0.0,
    where: Where | None = None,
) -> Iterator[list[ModelRun]]:
    """``model_run`` for several models at once (``registry tune A.onnx B.onnx``): one measurer and one clock, each
    model's tasks extracted and recorded."""
    clock = Clock(Timings(import_s=import_s))
    with running_measurer(target, threads, where or Where(), clock) as measurer:
        yield [_prepared(storage, loaded, target, clock, measurer, source, team) for loaded in models]


@contextlib.contextmanager
def running_measurer(target: Target, threads: int | None, where: Where, clock: Clock) -> Iterator[Measurer]:
    """The measurer's lifecycle: its workers started (the start counts as import time), stopped however the
    command ends."""
    with clock("import"):
        measurer = Measurer(target, threads, rpc=where.rpc, dop=where.dop, verbose=where.verbose)
    try:
        yield measurer
    finally:
        measurer.close()


def _prepared(
    storage: RegistryStorage,
    loaded: LoadedModel,
    target: Target,
    clock: Clock,
    measurer: Measurer,
    source: str,
    team: str | None,
) -> ModelRun:
    """One model's run: its tasks extracted and recorded, and its TVM database opened for the measurer's device."""
    with clock("import"):
        tasks = extract(storage, loaded, target)
        tvm_database = registry_database(storage, measurer.device, tasks, source, team, loaded.name)
    return ModelRun(storage, loaded, target, clock, tasks, measurer, tvm_database)


def registry_database(
    storage: RegistryStorage, device: DeviceSpec, tasks: list[RunTask], source: str, team, model
) -> RegistryDatabase:
    """The TVM database of ``device`` over ``storage``, filing records as ``source`` and naming them by task."""
    return RegistryDatabase(
        device.target,
        storage,
        device=device,
        source=source,
        team=team,
        model=model,
        task_names={t.ident[0]: t.name for t in tasks},
    )


def default_timings(run: ModelRun, tasks: list[RunTask]) -> dict[int, Measurement]:
    """Each task's default schedule (what the model runs without records: naive loops on a CPU, DLight's on a GPU),
    timed like the candidates: the "before"."""
    from registry.measure.jobs import module_job

    with run.clock("report"):
        jobs = [module_job(default_schedule(t.mod, run.target), run.target, t.arguments) for t in tasks]
        measured = run.measurer.kernels(jobs)
    return {t.workload_id: m for t, m in zip(tasks, measured, strict=True)}


# -- the budget's reserve: what a time budget keeps back for the end -------------------------------------------------

# The tuned model takes longer to build than the untuned one (its kernels are unrolled and vectorized), so the reserve
# is 1.7x the untuned compile; the report, closing the workers and the exit take a few seconds more
# (docs/BENCHMARKS.md, "Evidence behind the code's rules").
TUNED_BUILD = 1.7
FINISH_MARGIN = 1.15
FINISH_SLACK_S = 5.0


def finish_estimate_s(untuned_compile_s: float, untuned_timing_s: float) -> float:
    """What ``finish`` is expected to spend, from what the untuned model cost: the tuned model's compile and export,
    and two timings (the untuned model's again, and the tuned one's)."""
    return TUNED_BUILD * untuned_compile_s + 2 * untuned_timing_s


def finishing_s(untuned: list[Untuned]) -> float:
    """What ``finish`` will take for these models: kept back from a time budget, so the command ends within it."""
    return sum(FINISH_MARGIN * u.seconds for u in untuned) + FINISH_SLACK_S


# -- the compile and the report ----------------------------------------------------------------------------------


@dataclass
class Untuned:
    """The model compiled without records and timed: the report's "untuned", and what the end of the run costs (a
    time budget keeps that much back)."""

    measurement: Measurement
    seconds: float  # what ``finish`` is expected to spend (``finish_estimate_s``)
    # Its library, exported once and timed again beside the final model, so that their ratio is taken in one run
    # without paying the untuned model's code generation twice.
    job: ModelJob
    library: contextlib.ExitStack  # holds the library (``model_job``'s) until ``finish`` closes it


def untuned_model(run: ModelRun) -> Untuned:
    start = time.perf_counter()
    library = contextlib.ExitStack()
    with run.clock("compile"):
        job = library.enter_context(model_job(_compile(run, ms.database.MemoryDatabase()), run.loaded.inputs))
    compiled = time.perf_counter()
    with run.clock("report"):
        measured = run.measurer.model(job, UNTUNED)
    timed = time.perf_counter()
    return Untuned(measured, finish_estimate_s(compiled - start, timed - compiled), job, library)


def default_record(run: ModelRun, task: RunTask, default_us: float, team: str | None) -> RecordIn | None:
    """The task's default schedule as a record, for a task whose measured schedules all lose to it (None on a GPU).

    Compiling with a registry applies whatever record a workload has, however slow: MetaSchedule does not know the
    default's time. A layer norm whose tuned candidates all took 15 times its unscheduled time doubled the model's
    latency (docs/BENCHMARKS.md, "Convergence against plain MetaSchedule's plateau"). Filed, the default is the best
    record and compiling keeps it. Its time is the default's median as this run measured it.
    """
    trace = default_trace(task.mod, run.target)
    if trace is None:
        return None
    return RecordIn(
        workload=task.ident,
        device=run.tvm_database.device,
        trace=trace,
        run_secs=(default_us / 1e6,),
        source="tuned",  # measured by this run like a tuned candidate: the schedule that changes nothing
        tool_version=hostinfo.tool_version(),
        team=team,
        model=run.loaded.name,
        host=hostinfo.hostname(),
    )


def finish(
    run: ModelRun, results: list[TaskResult], output: Path | None, untuned: Untuned | None = None
) -> ModelReport:
    """Compile the model with the registry (and untuned, unless ``untuned`` says how that went), time both end to
    end, and export the tuned one. A model that compiles but cannot be run is reported with the reason; its library
    is still written."""
    loaded, clock = run.loaded, run.clock
    untuned = untuned or untuned_model(run)
    _add_efforts(run, results)
    with clock("compile"):
        final_exe = _compile(run, run.tvm_database)
    if output is not None:
        _writable(output)
    with clock("report"), untuned.library:
        keep = str(output) if output else None
        before, final = before_and_after(run.measurer, untuned.job, final_exe, loaded.inputs, untuned.measurement, keep)
    errors = [f"{what}: {m.error}" for what, m in (("untuned model", before), ("final model", final)) if not m.ok]
    return ModelReport(
        model=loaded.name,
        device=run.measurer.device.name,
        threads=run.measurer.device.num_threads,
        untuned_ms=_ms(before),
        final_ms=_ms(final),
        tasks=results,
        timings=clock.timings,
        output=str(output) if output is not None else None,
        errors=errors,
        device_id=run.tvm_database.device_id,
        sha256=loaded.sha256,
    )


def _add_efforts(run: ModelRun, results: list[TaskResult]) -> None:
    """Each task's recorded effort on the device (every run's, this one's included), on its result."""
    efforts = run.storage.efforts([r.workload_id for r in results], run.tvm_database.device_id)
    for r in results:
        if r.workload_id in efforts:
            e = efforts[r.workload_id]
            r.effort_trials, r.effort_s, r.plateau = e.trials, round(e.seconds, 1), e.plateau


def _compile(run: ModelRun, database):
    try:
        return compile_model(database, run.loaded.mod, run.target, run.loaded.exact_math)
    except TVM_ERRORS as e:  # the schedules found so far stay committed: each is a complete, measured record
        raise RegistryError(f"{run.loaded.name}: compiling the model failed: {error_line(e)}") from None


def _ms(m: Measurement) -> float | None:
    return m.median_s * 1e3 if m.ok else None


def _writable(path: Path) -> None:
    """Fail early, in one line, when the library cannot be written where the user asked."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInputError(f"cannot write {path}: {e.strerror}") from None
    if path.is_dir() or not os.access(path if path.exists() else path.parent, os.W_OK):
        raise BadInputError(f"cannot write {path}: " + ("it is a directory" if path.is_dir() else "permission denied"))
