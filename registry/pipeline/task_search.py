"""One task's search, one batch at a time: MetaSchedule's ``EvolutionarySearch`` in a ``TuneContext``, with the
registry's resume, trimming, measuring and re-checking around it (the engine, ``registry.pipeline.engine``, decides
which task's search takes the next batch).

A search gets what it needs of its run through a ``SearchContext``, and nothing else of the engine. After each
measured batch it runs the context's ``after_measuring`` steps in order, as MetaSchedule runs its measure callbacks:
``CommitRecords`` stores the batch (a refused record becomes a failure), ``UpdateCostModel`` trains the cost model.
"""

from __future__ import annotations

import enum
import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.s_tir.schedule import Schedule
from tvm.target import Target

from registry import hostinfo
from registry.errors import RegistryWarning
from registry.measure.builder import PersistentBuilder, usable_cores
from registry.measure.calibrate import TOLERANCE
from registry.measure.jobs import artifact_job
from registry.measure.measurer import Measurer
from registry.measure.types import KernelJob, Measurement
from registry.pipeline.clock import Clock
from registry.pipeline.model_run import RunTask
from registry.pipeline.rules import rules_with_producers_inlined
from registry.pipeline.tuning_policy import EngineOptions, TaskState
from registry.records.database import RegistryDatabase
from registry.records.write import RecordWriter, Written
from registry.store.interface import RecordIn
from registry.store.rows import FAILED_RUN_SECS, DeviceSpec
from registry.store.traces import record_trace_hash
from registry.tvm_side.apply_trace import trace_json
from registry.tvm_side.compat import TVM_ERRORS, last_line
from registry.tvm_side.compile import scheduled_arguments
from registry.tvm_side.output_check import output_check

# A quick time may be up to the calibration's tolerance off: within that of the task's best, a candidate may become
# the best, so it is re-measured precisely.
RECHECK_MARGIN = 1 + TOLERANCE


class BatchEnd(enum.Enum):
    """How one turn of a task ended, which says what the engine accounts for it."""

    MEASURED = "measured"  # a batch was measured (donor seeds that beat what the task had count as its first)
    EXHAUSTED = "exhausted"  # the search proposed nothing: its space is spent, the task stops
    RESTARTED = "restarted"  # the search failed and begins again without the registry's records: no batch counted
    STOPPED = "stopped"  # the search could not be built or failed again: the task stopped, its reason set


@dataclass
class MeasuredBatch:
    """What one batch measured, as the ``after_measuring`` steps see it: candidates, their traces and results in the
    same order. A step may replace a result (a record the registry refused is a failure to the search)."""

    task: RunTask
    tune_context: ms.TuneContext
    candidates: list[MeasureCandidate]
    traces: list
    results: list[RunnerResult]


MeasureStep = Callable[[MeasuredBatch], None]


@dataclass
class SearchContext:
    """What a task's search needs of its run: the device-bound TVM database it is seeded from, the cost model, the
    build pool and measurer, the clock, the options, and the steps run after each measured batch."""

    target: Target
    tvm_database: RegistryDatabase
    cost_model: ms.cost_model.CostModel
    builder: PersistentBuilder
    measurer: Measurer
    clock: Clock
    options: EngineOptions
    after_measuring: list[MeasureStep]


@dataclass
class CommitRecords:
    """The step that stores every measured record through the registry's one check. A refused one is not stored, so
    it can never be a best: the search learns it as a failure. A refusal is a bug of the tuning path (a trace not made
    on the stored workload), so it is also warned of."""

    writer: RecordWriter
    device: DeviceSpec
    team: str | None
    model: str

    def __call__(self, batch: MeasuredBatch) -> None:
        records = [self._record(batch.task, trace, r) for trace, r in zip(batch.traces, batch.results, strict=True)]
        refused = refused_positions(records, self.writer.write(records))
        for why in list(refused.values())[:1]:
            warnings.warn(
                f"{batch.task.name}: {len(refused)} of {len(records)} tuned record(s) refused, not stored: {why}",
                RegistryWarning,
                stacklevel=2,
            )
        for k, why in refused.items():
            batch.results[k] = RunnerResult(None, f"not stored: {why}")

    def _record(self, task: RunTask, trace: list, result: RunnerResult) -> RecordIn:
        return RecordIn(
            workload=task.ident,
            device=self.device,
            trace=trace,
            run_secs=tuple(_run_secs(result)) or (FAILED_RUN_SECS,),
            source="tuned",
            tool_version=hostinfo.tool_version(),
            team=self.team,
            model=self.model,
            host=hostinfo.hostname(),
        )


@dataclass
class UpdateCostModel:
    """The step that trains the cost model on what a batch measured."""

    cost_model: ms.cost_model.CostModel
    clock: Clock

    def __call__(self, batch: MeasuredBatch) -> None:
        with self.clock("search"):
            self.cost_model.update(batch.tune_context, batch.candidates, batch.results)


def refused_positions(records: list[RecordIn], written: Written) -> dict[int, str]:
    """The positions in ``records`` of those the writer refused, with why. Matched by identity: two records may be
    equal in value and differ in fate."""
    return {k: why.reason for k, record in enumerate(records) for r, why in written.refused if r is record}


class TaskSearch:
    """One task's TuneContext and search state, advanced one batch at a time."""

    def __init__(
        self, context: SearchContext, task: RunTask, stored: dict[str, list[float]], from_database: bool = True
    ) -> None:
        """``stored``: trace hash -> run_secs of the records earlier runs left for this task on this device (the
        engine adds what other runs measure later). ``from_database``: whether the search's first population takes
        the task's best stored records (MetaSchedule's default), or only samples of its design spaces."""
        self.context, self.task, self.stored, self.from_database = context, task, stored, from_database
        with context.clock("search"):
            self.tune_context = self._started_tune_context()
        self.seen: set[str] = set()  # trace hashes of this run's candidates: a duplicate is not measured twice
        self.output_check = output_check(task.mod, context.target, context.measurer)

    def _started_tune_context(self) -> ms.TuneContext:
        """The task's TuneContext, its design spaces built and its search begun."""
        try:
            tune_context, spaces = self._tune_context("post-order-apply")
        except TVM_ERRORS:
            # MetaSchedule's own rules fail on some fused workloads; try again with input-only producers inlined
            # first (see rules.py). If that fails too, the engine stops this task with the reason.
            generator = ms.space_generator.PostOrderApply(
                sch_rules=rules_with_producers_inlined(self.context.target),
                postprocs="from-target",
                mutator_probs="from-target",
            )
            tune_context, spaces = self._tune_context(generator)
        tune_context.pre_tuning(
            max_trials=1 << 30,  # the planner decides when to stop
            num_trials_per_iter=self.context.options.batch,
            design_spaces=spaces,
            database=self.context.tvm_database,
            cost_model=self.context.cost_model,
        )
        return tune_context

    def _tune_context(self, space_generator) -> tuple[ms.TuneContext, list[Schedule]]:
        """A TuneContext for the task and its design spaces; raises what TVM raises when they cannot be built."""
        opts = self.context.options
        tune_context = ms.TuneContext(
            mod=self.task.mod,
            target=self.context.target,
            space_generator=space_generator,
            search_strategy=ms.search_strategy.EvolutionarySearch(
                population_size=opts.population,
                genetic_num_iters=opts.genetic_iters,
                eps_greedy=opts.eps_greedy,
                init_min_unmeasured=min(50, opts.population // 4),
                init_measured_ratio=0.2 if self.from_database else 0.0,
            ),
            task_name=self.task.name,
            rand_state=opts.seed,
            num_threads=usable_cores(),
        )
        return tune_context, tune_context.generate_design_space()

    def restarted_without_database(self) -> TaskSearch:
        """The same task's search begun again with a population sampled from its design spaces only; what this one
        measured is not measured again."""
        fresh = TaskSearch(self.context, self.task, self.stored, from_database=False)
        fresh.seen, fresh.output_check = self.seen, self.output_check
        return fresh

    def close(self) -> None:
        """End MetaSchedule's search. A search that failed may fail to close; nothing of it is needed any more."""
        try:
            self.tune_context.post_tuning()
        except TVM_ERRORS:
            pass

    @staticmethod
    def candidate(sch: Schedule) -> MeasureCandidate:
        return MeasureCandidate(sch, ArgInfo.from_prim_func(next(iter(sch.mod.functions.values()))))

    def batch(self, state: TaskState, trials_left: int | None) -> BatchEnd:
        """Propose a batch, drop its predicted-worst share and what the trial budget cannot pay for, measure the
        rest, and tell the search how every candidate fared."""
        with self.context.clock("search"):
            proposed = self.tune_context.generate_measure_candidates()
        if not proposed:
            return BatchEnd.EXHAUSTED
        proposed = list(proposed)
        kept, dropped = self._trim(proposed)
        if trials_left is not None and len(kept) > trials_left:
            kept, dropped = kept[:trials_left], dropped + kept[trials_left:]
        state.candidates += len(proposed)
        results = self.measure(state, kept)
        trimmed = [RunnerResult(None, "not measured: predicted poor") for _ in dropped]
        with self.context.clock("search"):
            self.tune_context.notify_runner_results(kept + dropped, results + trimmed)
        return BatchEnd.MEASURED

    def _trim(self, proposed: list[MeasureCandidate]) -> tuple[list[MeasureCandidate], list[MeasureCandidate]]:
        """Drop the predicted-worst share of a batch, once the cost model has been trained on anything."""
        model = self.context.cost_model
        keep = max(1, round(len(proposed) * self.context.options.trim.keep))
        if keep >= len(proposed) or getattr(model, "booster", None) is None:
            return proposed, []
        with self.context.clock("search"):
            scores = model.predict(self.tune_context, proposed)
        order = sorted(range(len(proposed)), key=lambda i: -scores[i])
        return [proposed[i] for i in order[:keep]], [proposed[i] for i in order[keep:]]

    def measure(self, state: TaskState, candidates: list[MeasureCandidate]) -> list[RunnerResult]:
        """Results for ``candidates`` in order: stored ones from the registry, the others built and measured, then
        passed through the ``after_measuring`` steps. The task's best is updated from all of them."""
        traces = [trace_json(c.sch) for c in candidates]
        results, todo = self._known_results(traces)
        if todo:
            batch = MeasuredBatch(
                self.task,
                self.tune_context,
                [candidates[i] for i in todo],
                [traces[i] for i in todo],
                self._build_and_measure([candidates[i] for i in todo], state),
            )
            for step in self.context.after_measuring:
                step(batch)
            for i, r in zip(todo, batch.results, strict=True):
                results[i] = r
            state.measurements += len(todo)
        for r in results:
            if r.error_msg is None and r.run_secs:
                us = mean_us(r)
                if state.best_us is None or us < state.best_us:
                    state.best_us = us
        return results

    def _known_results(self, traces: list) -> tuple[list[RunnerResult | None], list[int]]:
        """The results known without measuring (stored by an earlier run, or a duplicate of this run's), and the
        positions left to measure."""
        results: list[RunnerResult | None] = [None] * len(traces)
        todo = []
        for i, trace in enumerate(traces):
            key = record_trace_hash(trace)
            if key in self.stored:  # measured by an earlier run: resume, do not measure again
                secs = self.stored[key]
                ok = secs and max(secs) < FAILED_RUN_SECS
                results[i] = RunnerResult(secs if ok else None, None if ok else "failed in an earlier run")
            elif key in self.seen:
                results[i] = RunnerResult(None, "duplicate of a candidate of this run")
            else:
                self.seen.add(key)
                todo.append(i)
        return results, todo

    def _build_and_measure(self, candidates: list[MeasureCandidate], state: TaskState) -> list[RunnerResult]:
        context = self.context
        with context.clock("measure"):
            built = context.builder.build([BuilderInput(c.sch.mod, context.target) for c in candidates])
            results = [Measurement((), f"build failed: {last_line(b.error_msg, 'unknown error')}") for b in built]
            jobs = {
                i: artifact_job(b.artifact_path, scheduled_arguments(self.task.arguments, candidates[i].sch.mod))
                for i, b in enumerate(built)
                if not b.error_msg
            }
            for i, m in zip(jobs, context.measurer.measure(list(jobs.values())), strict=True):
                results[i] = m
            self._recheck(results, jobs, state, candidates)
            for b in built:
                if b.artifact_path:
                    shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
        return [RunnerResult(list(m.run_secs) if m.ok else None, m.error) for m in results]

    def _recheck(
        self,
        results: list[Measurement],
        jobs: dict[int, KernelJob],
        state: TaskState,
        candidates: list[MeasureCandidate],
    ) -> None:
        """Re-measure alone and precisely whatever could become the task's best, before it is recorded: the batch's
        fastest by the quick pass, then the next one for as long as its quick latency beats every re-checked one.
        Each is first run against the workload's outputs (``output_check``): a wrong one is recorded as failed."""
        best = state.best_us / 1e6 if state.best_us is not None else float("inf")
        ranked = sorted((results[i].median_s, i) for i in jobs if results[i].ok)
        checked: list[float] = []
        for quick_s, i in ranked:
            if quick_s >= best * RECHECK_MARGIN or (checked and quick_s >= min(checked)):
                break
            wrong = self.output_check.problem(candidates[i].sch.mod) if self.output_check is not None else None
            if wrong is not None:
                results[i] = Measurement((), wrong)
                continue
            [results[i]] = self.context.measurer.recheck([jobs[i]])
            checked.append(results[i].median_s)


def _run_secs(result: RunnerResult) -> list[float]:
    """A result's seconds as Python floats (TVM hands them back as FloatImm), empty if it failed."""
    return [float(s) for s in result.run_secs] if result.error_msg is None and result.run_secs else []


def mean_us(result: RunnerResult) -> float:
    """The latency a record is ranked by in the store (the mean of its run_secs), in µs."""
    secs = _run_secs(result)
    return sum(secs) / len(secs) * 1e6
