"""Tuning models (``registry tune``): every task searched with the registry's engine, seeded from donors.

1. Each model's tasks are extracted and recorded; a task several models share is tuned once, its weight the sum
   of theirs. Each task's default schedule is timed (the report's "before").
2. Donors: the nearest stored workloads' best traces, applied to each task, seed its search.
3. The engine (``registry.pipeline.engine``) spends the budget across the tasks; every measured record goes
   to the registry at once, so an interrupted run resumes where it stopped. Runs sharing a registry divide its
   tasks by leases, and skip the tasks whose recorded effort reached a plateau (``registry.pipeline.effort``).
4. Each model is compiled with the registry and timed end to end, as transfer does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tvm.target import Target

from registry.errors import BadInputError
from registry.options import TRIALS_PER_TASK, TuneOptions
from registry.pipeline.donor_schedules import RunDonors
from registry.pipeline.engine import Engine, EngineTask, Outcome
from registry.pipeline.model_run import (
    ModelRun,
    Progress,
    RunTask,
    Where,
    default_timings,
    finish,
    finishing_s,
    model_runs,
    registry_database,
    untuned_model,
)
from registry.pipeline.tuning_policy import EngineOptions, TrimOptions
from registry.report.model_report import ModelReport, TaskResult
from registry.store.interface import RegistryStorage
from registry.tvm_side.frontend import LoadedModel


@dataclass
class ModelTuneOptions:
    engine: EngineOptions = field(default_factory=EngineOptions)
    neighbours: int = 5  # donor workloads whose traces seed each task
    team: str | None = None
    output: Path | None = None
    where: Where = field(default_factory=Where)  # where to measure

    @classmethod
    def of(cls, options: TuneOptions, *, team: str | None, output: Path | None, where: Where) -> ModelTuneOptions:
        """The settings for ``options`` as `registry tune` and `registry.tune()` take them (``min_gain``,
        ``min_share`` in percent, the planner's rules in shares)."""
        o = options
        trim = TrimOptions(min_share=o.min_share / 100, min_gain_per_min=o.min_gain / 100, keep=o.keep, floor=o.floor)
        engine = EngineOptions(
            trials=o.trials, seconds=o.seconds, batch=o.batch, trim=trim, use_predictor=o.predictor,
            plateau_window=o.plateau, retune=o.retune, lease_s=o.lease,
        )  # fmt: skip
        return cls(engine=engine, team=team, output=output, where=where)


def tune(
    store: RegistryStorage,
    loaded: LoadedModel,
    target: Target,
    threads: int | None,
    options: ModelTuneOptions | None = None,
    progress: Progress = lambda _done, _total, _what: None,
    import_s: float = 0.0,
) -> ModelReport:
    return tune_models(store, [loaded], target, threads, options, progress, import_s)[0]


def tune_models(
    store: RegistryStorage,
    models: list[LoadedModel],
    target: Target,
    threads: int | None,
    options: ModelTuneOptions | None = None,
    progress: Progress = lambda _done, _total, _what: None,
    import_s: float = 0.0,
) -> list[ModelReport]:
    """Tune several models under one budget: each task once, however many of them share it, with their weights
    summed; then compile and report each model."""
    opts = options or ModelTuneOptions()
    if opts.output is not None and len(models) > 1:
        raise BadInputError("-o/--output exports one model's library: tune several models without it")
    started = time.perf_counter() - import_s  # a time budget counts from the start of the command
    with model_runs(store, models, target, threads, "tuned", opts.team, import_s, opts.where) as runs:
        run = joined(runs, opts.team)
        # the untuned models compiled and timed before tuning: what that costs is what the end needs again (the
        # tuned models), so a time budget keeps it back, and the whole command ends within the budget. After the
        # defaults: the workers' start is then not counted as part of timing a model.
        defaults = default_timings(run, run.tasks)
        untuned = [untuned_model(r) for r in runs]
        with run.clock("donors"):
            donors = RunDonors(store, target, run.tvm_database.device_id, opts.neighbours, opts.engine.seeds)
        engine_tasks = {
            t.workload_id: EngineTask(t, defaults[t.workload_id].median_us, [], defaults[t.workload_id].error)
            for t in run.tasks
        }
        engine_opts = opts.engine
        if engine_opts.trials is None and engine_opts.seconds is None:
            engine_opts = replace(engine_opts, trials=TRIALS_PER_TASK * len(run.tasks))
        deadline = None
        if engine_opts.seconds is not None:
            deadline = started + engine_opts.seconds - finishing_s(untuned)
        tasks = list(engine_tasks.values())
        outcome = run_engine(run, run.tvm_database, engine_opts, opts.team, progress, tasks, deadline, donors)
        reports = []
        for model_run, model_untuned in zip(runs, untuned, strict=True):
            # each model's report weighs a task by that model's own count of it
            results = [task_result(replace(engine_tasks[t.workload_id], task=t), outcome) for t in model_run.tasks]
            report = finish(model_run, results, opts.output, model_untuned)
            report.tuning, report.history = tuning_summary(outcome), outcome.history
            reports.append(report)
    return reports


def joined(runs: list[ModelRun], team: str | None) -> ModelRun:
    """One run over every model's tasks: each workload once, its weight the sum of the models'. Its records name
    the first model (a record has one model; ``registry report`` finds every model's tasks by workload)."""
    if len(runs) == 1:
        return runs[0]
    tasks: dict[int, RunTask] = {}
    for run in runs:
        for t in run.tasks:
            known = tasks.get(t.workload_id)
            tasks[t.workload_id] = t if known is None else replace(known, weight=known.weight + t.weight)
    lead = runs[0]
    merged = list(tasks.values())
    tvm_database = registry_database(lead.storage, lead.measurer.device, merged, "tuned", team, lead.loaded.name)
    return replace(lead, tasks=merged, tvm_database=tvm_database)


def run_engine(
    run: ModelRun,
    tvm_database,
    options,
    team,
    progress,
    tasks: list[EngineTask],
    deadline=None,
    donors: RunDonors | None = None,
) -> Outcome:
    engine = Engine(run, tvm_database, options, team, progress, donors)
    try:
        return engine.run(tasks, deadline)
    finally:
        engine.close()


def task_result(t: EngineTask, outcome: Outcome) -> TaskResult:
    state = outcome.states[t.task.workload_id]
    improved = state.best_us is not None and (t.default_us is None or state.best_us < t.default_us)
    failed = not improved and t.default_us is None  # nothing ran: neither the default schedule nor a candidate
    return TaskResult(
        t.task.name,
        t.task.weight,
        t.task.workload_id,
        "tuned" if improved else "failed" if failed else "default",
        t.default_us,
        state.latency_us,
        candidates=state.measurements,
        trials=state.measurements,
        measurements=state.measurements,
        proposed=state.candidates,
        tune_s=state.seconds,
        stopped=state.stopped,
        error=t.default_error if failed else None,
    )


def tuning_summary(outcome: Outcome) -> dict:
    cal = outcome.calibration
    parts = [outcome.measured]
    if cal is not None:
        parts.append(f"calibrated in {cal.seconds:.1f} s: {cal.summary()}")
    if outcome.predictor_version and outcome.predictor_from:
        parts.append(f"predictor v{outcome.predictor_version} of sibling device {outcome.predictor_from}")
    else:
        parts.append(f"predictor v{outcome.predictor_version}" if outcome.predictor_version else "no stored predictor")
    if outcome.waited_s:
        parts.append(f"waited {outcome.waited_s:.0f} s for tasks other runs held")
    parts.append(f"stopped: {outcome.stop}")
    return {
        "measurer": outcome.measurer,
        "dop": outcome.dop,
        "calibration": None if cal is None else {"seconds": cal.seconds, "table": cal.table},
        "predictor_version": outcome.predictor_version,
        "predictor_from": outcome.predictor_from,
        "stop": outcome.stop,
        "trials": outcome.trials,
        "waited_s": round(outcome.waited_s, 1),
        "summary": "tuning: " + "; ".join(parts),
    }
