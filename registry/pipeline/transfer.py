"""Transfer-tuning of one model: reuse the registry's schedules of similar operators, task by task.

For each task of the model, in order of preference:

1. **exact**: the same workload already has a record on this device; compilation will use it.
2. **transferred**: the nearest stored workloads of the same operator kind (FAISS over signature embeddings) donate
   their best traces; each is applied to the task (replayed, or through its anchor block for a fused variant), the
   candidates are built and timed here, and the fastest is committed as a ``transferred`` record naming its donor,
   but only if it beats the task's default schedule. A 1x1 convolution's matrix-product schedules
   (``tvm_side/gemm_schedules.py``) are measured with its donors' candidates; one that wins is committed as ``tuned``.
3. **default**: no donor helped. The task keeps TVM's default schedule until it is tuned (``registry tune``).
4. **failed**: neither the default schedule nor any candidate could be built or run (the reason is reported).

Then the fallback: ``tune_trials`` measured trials for each task left on the default schedule or failed, and for each
transferred task whose schedule reached less than ``retune_below`` of the best FLOP rate its donors' own records
reached (``similarity.donors.best_rate``). A donor's schedule beats TVM's naive CPU default by far, so "it beat the
default" says little: a transferred convolution can stay several times slower than a tuned one and never be tuned
(docs/BENCHMARKS.md, "Evidence behind the code's rules"). What schedules searched for similar
workloads reached says what a good one reaches here. Records that were themselves transferred do not count: a poor
transfer earlier in the same model would otherwise vouch for the next one. A task left on the default whose first
donor's best record is the default itself is not tuned (``kept_the_default``): the workload nearest it was searched,
and nothing beat its default.

Every timing goes through the run's measurer, in worker processes: a candidate that crashes costs that candidate.
The model is then compiled with the registry as its MetaSchedule database, and its end-to-end latency measured
against the untuned build.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from tvm.target import Target

from registry import hostinfo
from registry.errors import RegistryWarning
from registry.measure.jobs import module_job
from registry.measure.types import Measurement
from registry.options import MEASURED_CANDIDATES, TRANSFER
from registry.pipeline.donor_schedules import DonorSchedules, RunDonors
from registry.pipeline.engine import EngineTask
from registry.pipeline.model_run import (
    ModelRun,
    Progress,
    RunTask,
    Untuned,
    Where,
    default_record,
    default_timings,
    finish,
    finishing_s,
    model_run,
    say,
    untuned_model,
)
from registry.pipeline.tuning_policy import EngineOptions
from registry.records.write import RecordWriter
from registry.report.model_report import ModelReport, TaskResult
from registry.similarity.donors import Donor, best_rate
from registry.similarity.index import SimilarityIndex
from registry.store.embedding import embed
from registry.store.interface import RegistryStorage, StoredRecord
from registry.store.rows import RecordIn
from registry.store.validation import is_default_schedule
from registry.store.values import scores_at, unseen_top1
from registry.tvm_side import apply_trace
from registry.tvm_side.compat import TVM_ERRORS
from registry.tvm_side.frontend import LoadedModel
from registry.tvm_side.gemm_schedules import matrix_product_seeds
from registry.tvm_side.output_check import output_check
from registry.tvm_side.predictor import scores_of

# Donor programs a predictor ranks per task, of which a transfer measures what the predictor's score warrants.
RANKED = 8


@dataclass
class ModelTransferOptions:
    """The transfer's settings: ``registry.options.TransferOptions`` as this pipeline takes them, and its own."""

    candidates: int = MEASURED_CANDIDATES  # schedules measured per task, at most
    neighbours: int = TRANSFER.neighbours  # donor workloads considered per task
    per_device: int = 2  # records taken from each donor workload on each device
    team: str | None = None
    output: Path | None = None  # where to export the compiled library
    # Fallback tuning of the tasks no donor helped, and of poor transfers: this many measured trials per such task
    # (0: none).
    tune_trials: int = TRANSFER.tune_trials
    # ... within what is left of this many seconds of the whole command's wall time, once the transfers are measured
    # and the compile is provided for (None: no limit, 0: no tuning): a user who asked to transfer did not ask for
    # half an hour of tuning. The transfers themselves take fewer candidates a task as it ends.
    tune_seconds: float | None = TRANSFER.tune_budget
    # A transferred task whose schedule reached less than this share of its donors' best FLOP rate is tuned too (0:
    # never).
    retune_below: float = TRANSFER.retune_below
    tune: EngineOptions = field(default_factory=EngineOptions)
    where: Where = field(default_factory=Where)  # where to measure


def transfer(
    storage: RegistryStorage,
    loaded: LoadedModel,
    target: Target,
    threads: int | None,
    options: ModelTransferOptions | None = None,
    progress: Progress = lambda _done, _total, _what: None,
    import_s: float = 0.0,
) -> ModelReport:
    """Transfer-tune ``loaded`` for ``target`` at ``threads`` runtime threads (None: the runtime's default); see the
    module docstring."""
    opts = options or ModelTransferOptions()
    started = time.perf_counter() - import_s  # a time budget counts from the start of the command
    with model_run(storage, loaded, target, threads, "transferred", opts.team, import_s, opts.where) as run:
        with run.clock("donors"):
            index = SimilarityIndex(storage)
            index.load()  # rebuilt here if stale, so that the first task does not pay for it
        resolver = _Resolver(run, index, opts)
        progress(0, len(run.tasks), "timing each task's default schedule")
        defaults = default_timings(run, run.tasks)  # together: on a GPU they are built on every core at once
        # compiled and timed before tuning, as `registry tune` does: what that costs is what the end needs again, so
        # the time budget keeps it back and the whole command ends within --tune-budget
        untuned = untuned_model(run)
        # a budget of 0 tunes nothing; it does not stint the transfers
        deadline = _deadline(opts, started, untuned) if opts.tune_seconds else None
        results = _resolve_all(run, resolver, defaults, deadline, progress)
        tuning, history = None, None
        wanted = [(task, r) for task, r in zip(run.tasks, results, strict=True) if _needs_tuning(r, opts)]
        fallback = [(task, r) for task, r in wanted if not resolver.keeps_default(task, r)]
        seconds = _tuning_seconds(opts, started, untuned)
        tunes = bool(fallback) and opts.tune_trials > 0 and (seconds is None or seconds >= MIN_TUNING_S)
        say(progress, _plan(results, fallback, opts, tunes, seconds, kept=len(wanted) - len(fallback)))
        if tunes:
            tuning, history = _tune_fallback(run, opts, resolver, fallback, progress, seconds)
        progress(len(run.tasks), len(run.tasks), "compiling")
        report = finish(run, results, opts.output, untuned)
    report.tuning, report.history = tuning, history
    report.ranked_by = resolver.ranking()
    return report


def _resolve_all(
    run: ModelRun, resolver: _Resolver, defaults: dict[int, Measurement], deadline: float | None, progress: Progress
) -> list[TaskResult]:
    """Each task's result, in the model's order. The tasks are resolved heaviest first (the most default time a
    call), so that when ``deadline`` (``time.perf_counter``'s) nears, the tasks left with fewer candidates are the
    light ones. Each task gets as many candidates (up to ``ModelTransferOptions.candidates``) as what is left of the
    time allows at the cost of a candidate so far, and at least one: a task left on its default can cost the model more
    than the whole budget (a ddddocr-det's 416x416 convolution runs 230 ms unscheduled, 3.4 ms transferred)."""
    order = sorted(range(len(run.tasks)), key=lambda k: -_default_cost(run.tasks[k], defaults))
    results: dict[int, TaskResult] = {}
    spent, measured = 0.0, 0
    for done, k in enumerate(order):
        task = run.tasks[k]
        progress(done, len(run.tasks), task.name)
        candidates = resolver.opts.candidates
        if deadline is not None and measured:
            per_task = (deadline - time.perf_counter()) / (len(order) - done)
            candidates = max(1, min(candidates, int(per_task / (spent / measured))))
        began = time.perf_counter()
        results[k] = resolver.resolve(task, defaults[task.workload_id], candidates)
        if results[k].candidates:
            spent, measured = spent + time.perf_counter() - began, measured + results[k].candidates
    return [results[k] for k in range(len(run.tasks))]


def _default_cost(task: RunTask, defaults: dict[int, Measurement]) -> float:
    """A task's default schedule's time in one call of the model (a task whose default did not run: first)."""
    default = defaults[task.workload_id]
    return task.weight * default.median_s if default.ok else float("inf")


MIN_TUNING_S = 10.0  # less than this would not finish one batch of a large task


def _deadline(opts: ModelTransferOptions, started: float, untuned: Untuned) -> float | None:
    """When (``time.perf_counter``'s) the budget ends, less what the end will take (None: no limit)."""
    if opts.tune_seconds is None:
        return None
    return started + opts.tune_seconds - finishing_s([untuned])


def _tuning_seconds(opts: ModelTransferOptions, started: float, untuned: Untuned) -> float | None:
    """What the budget leaves for tuning now, less what the end will take (None: no limit). The end is estimated from
    the model's own untuned build (``finishing_s``): a fixed reserve lets a model whose untuned build runs seconds a
    call overrun its budget (docs/BENCHMARKS.md, "Evidence behind the code's rules")."""
    deadline = _deadline(opts, started, untuned)
    return None if deadline is None else max(0.0, deadline - time.perf_counter())


def _plan(
    results: list[TaskResult],
    fallback: list,
    opts: ModelTransferOptions,
    tunes: bool,
    seconds: float | None,
    kept: int = 0,
) -> str:
    """What transfer found and is about to do, in one line, before any tuning starts. ``kept``: the tasks left on
    TVM's default because their first donor's best is the default (``kept_the_default``)."""
    count = {s: sum(1 for r in results if r.source == s) for s in ("exact", "transferred", "tuned")}
    found = f"{len(results)} task(s): {count['exact']} exact, {count['transferred']} transferred"
    if count["tuned"]:
        found += f", {count['tuned']} scheduled as matrix products"
    if kept:
        found += f", {kept} kept on TVM's default as their nearest donor's tuning kept it"
    if not fallback:
        return f"{found}; nothing left to tune"
    poor = sum(1 for _, r in fallback if r.source == "transferred")
    why = ", ".join(f"{n} {what}" for n, what in ((len(fallback) - poor, "without a usable donor"),
                    (poor, f"under {opts.retune_below:.0%} of their donors' FLOP rate")) if n)  # fmt: skip
    if not tunes:
        cause = "no time is left of --tune-budget" if opts.tune_trials > 0 and opts.tune_seconds else "tuning is off"
        return f"{found}; {len(fallback)} left untuned ({why}): {cause} (--tune-budget, --tune-trials)"
    limit = f"at most {_minutes(seconds)}" if seconds is not None else "without a time limit"
    return (
        f"{found}; tuning {len(fallback)} ({why}) for {limit} and {opts.tune_trials} trials a task "
        "(--tune-budget, --tune-trials; 0 skips it); the rest keep their best transfer or TVM's default"
    )


def _minutes(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def kept_the_default(donors: list[Donor], device_threads: dict[int, int], threads: int | None) -> Donor | None:
    """The donor whose best record comes first (``donor_order``: this device's first, then the nearest), where that
    record is TVM's default schedule kept by a search: the workload nearest the task was searched and nothing beat
    its default; else None. On a CPU that is typical of layer norms, softmaxes and means (a ViT's softmax: 120
    candidates, all slower than the default; docs/BENCHMARKS.md, "Convergence against plain MetaSchedule's plateau"),
    and tuning the task would spend its share of the budget finding the same. Only a record made by a search counts
    (not a transferred one, which says what a donor's schedule made of it), and only one timed at this device's
    runtime threads (``device_threads``: device id -> threads): at more threads a parallel schedule can beat a
    default that one thread keeps. An imported record is its registry's claim: at worst the task keeps the default
    that was timed here, and ``registry tune`` tunes it."""
    first = next((d for d in donors if d.rank == 1), None)
    if first is None or first.source == "transferred" or not _is_default(first):
        return None
    return first if first.same_device or device_threads.get(first.device_id) == threads else None


def _is_default(donor: Donor) -> bool:
    """Whether the donor's record is TVM's default schedule (``validation.is_default_schedule``)."""
    try:
        trace = json.loads(donor.record.trace_json)
    except ValueError:
        return False
    return isinstance(trace, list) and bool(trace) and is_default_schedule(trace[0])


def _needs_tuning(result: TaskResult, opts: ModelTransferOptions) -> bool:
    """Whether the fallback tunes this task: no donor helped it, or its schedule reached a small share of the rate its
    donors reached on their own workloads."""
    if result.source in ("default", "failed"):
        return True
    share = result.of_donor_rate
    return result.source == "transferred" and share is not None and share < opts.retune_below


def _tune_fallback(
    run: ModelRun, opts: ModelTransferOptions, resolver: _Resolver, fallback, progress: Progress, seconds: float | None
) -> tuple[dict, list[dict]]:
    """The engine of ``registry tune`` on the tasks ``_needs_tuning`` picked, seeded with the donor schedules transfer
    tried for them; each result is updated in place, a transferred one only where tuning beat its transferred
    schedule. Returns the tuning summary and history."""
    from dataclasses import replace

    from registry.pipeline.tune import run_engine, task_result, tuning_summary

    tasks = [task for task, _ in fallback]
    tvm_database = run.tvm_database_for(tasks, "tuned", opts.team)
    engine_opts = replace(opts.tune, trials=opts.tune_trials * len(fallback), seconds=seconds)
    deadline = time.perf_counter() + seconds if seconds is not None else None
    engine_tasks = [
        EngineTask(task, r.before_us, resolver.tried.get(task.workload_id, []), r.error) for task, r in fallback
    ]
    # A transferred task's record, as the engine starts from it: it stays the task's unless tuning beat it.
    transferred_us = {
        task.workload_id: resolver.best_here_us(task.workload_id) for task, r in fallback if r.source == "transferred"
    }
    # a task transfer found no donor for is seeded, when its first batch comes, from those tuned before it
    donors = RunDonors(
        run.storage, run.target, tvm_database.device_id, opts.neighbours, opts.tune.seeds, resolver.index
    )
    outcome = run_engine(run, tvm_database, engine_opts, opts.team, progress, engine_tasks, deadline, donors)
    for t, (_, result) in zip(engine_tasks, fallback, strict=True):
        tuned = task_result(t, outcome)
        kept = transferred_us.get(t.task.workload_id)
        if kept is None or (tuned.after_us is not None and tuned.after_us < kept):
            result.source, result.after_us, result.error = tuned.source, tuned.after_us, tuned.error
        result.trials, result.measurements, result.proposed, result.tune_s, result.stopped = (
            tuned.trials,
            tuned.measurements,
            tuned.proposed,
            tuned.tune_s,
            tuned.stopped,
        )
    return tuning_summary(outcome), outcome.history


class _Resolver:
    """Resolves one task at a time: exact hit, else the best donor candidate that beats the default, else default."""

    def __init__(self, run: ModelRun, index: SimilarityIndex, opts: ModelTransferOptions) -> None:
        self.run, self.storage, self.tvm_database = run, run.storage, run.tvm_database
        self.index, self.target = index, run.target
        self.opts, self.clock, self.model = opts, run.clock, run.loaded.name
        self.schedules = DonorSchedules(run.storage, run.target)
        self.writer = RecordWriter(run.storage)
        self.tried: dict[int, list] = {}  # workload id -> donor schedules measured: seeds for fallback tuning
        self.default_kept: dict[int, Donor] = {}  # workload id -> its first donor, whose best is the default
        self.device_threads = {d.id: d.num_threads for d in run.storage.all_devices()}
        # the device's predictor (or a sibling's) ranks each task's donor programs: only the first are measured
        self.predictor = run.predictor() if opts.tune.use_predictor else None

    def _time(self, task: RunTask, mod) -> Measurement:
        return self.run.measurer.kernels([module_job(mod, self.target, task.arguments)])[0]

    def resolve(self, task: RunTask, default: Measurement, candidates: int | None = None) -> TaskResult:
        """``default``: the task's default schedule, timed; ``candidates``: donor schedules to measure at most (None:
        ``ModelTransferOptions.candidates``)."""
        before = default.median_us
        result = TaskResult(task.name, task.weight, task.workload_id, "default", before, before, candidates=0)
        if not default.ok:
            result.source, result.error = "failed", f"default schedule: {default.error}"
        with self.clock("donors"):
            best = self._best_here(task.workload_id)
        if best is not None:
            with self.clock("report"):  # timed here like the default, so that before -> after is one comparison
                stored = apply_trace.as_stored(task.mod, json.loads(best.trace_json))
                timing = self._time(task, stored.mod) if stored is not None else None
            result.source = "exact"
            result.after_us = timing.median_us if timing is not None and timing.ok else best.mean_s * 1e6
            if default.ok and result.after_us > before and self._keep_default(task, before):
                result.source, result.after_us = "default", before  # the stored best lost to the default
            return result
        with self.clock("donors"):
            donors = self.schedules.find(
                self.index, task, self.tvm_database.device_id, self.opts.neighbours, per_device=self.opts.per_device
            )
        if (first := kept_the_default(donors, self.device_threads, self.tvm_database.device.num_threads)) is not None:
            self.default_kept[task.workload_id] = first
        winner = self._best_candidate(task, donors, result, candidates or self.opts.candidates)
        if winner is None:
            return result
        donor, sch, timing = winner
        reference = best_rate(donors)
        if default.ok and timing.median_s >= default.median_s:
            return result  # the default schedule is at least as fast: keep it, commit nothing
        source = "transferred" if donor is not None else "tuned"  # no donor: a matrix-product schedule, built here
        refused = self._commit(task, donor, sch, timing, source)
        if refused is not None:  # the registry's one check refused it: the task keeps its default
            warnings.warn(
                f"{task.name}: the {source} schedule was refused, not stored: {refused}",
                RegistryWarning,
                stacklevel=2,
            )
            return result
        self.index.add(task.workload_id, embed(task.signature))  # a donor for the model's later tasks
        result.source, result.after_us = source, timing.median_us
        if donor is None:
            return result
        result.donor = f"{donor.task_name}#{donor.workload_id}"
        result.donor_record_id, result.distance, result.same_device = donor.record.id, donor.distance, donor.same_device
        if reference and task.signature.flops > 0:
            result.of_donor_rate = task.signature.flops / timing.median_s / reference
        return result

    def keeps_default(self, task: RunTask, result: TaskResult) -> bool:
        """Whether a task the fallback would tune stays on TVM's default instead: no donor beat its default, and the
        first donor's best record is the default itself (``kept_the_default``). Its result says so."""
        first = self.default_kept.get(task.workload_id)
        if result.source != "default" or first is None:
            return False
        where = "" if first.same_device else f" on device {first.device_id}"
        result.stopped = f"not tuned: its nearest donor {first.task_name}#{first.workload_id}{where} kept TVM's default"
        return True

    def _keep_default(self, task: RunTask, default_us: float) -> bool:
        """File the default as the task's record where the registry's best is slower (``model_run.default_record``);
        whether it was filed (not on a GPU, nor where the registry's one check refused it)."""
        record = default_record(self.run, task, default_us, self.opts.team)
        return record is not None and not self.writer.write([record]).refused

    def _best_here(self, workload_id: int) -> StoredRecord | None:
        best = self.storage.top_k(workload_id, self.tvm_database.device_id, 1)
        return best[0] if best else None

    def best_here_us(self, workload_id: int) -> float | None:
        """The workload's best record on this device, in µs, as the registry (and so the tuning engine) sees it."""
        best = self._best_here(workload_id)
        return best.mean_s * 1e6 if best is not None and best.mean_s is not None else None

    def _best_candidate(self, task: RunTask, donors: list[Donor], result: TaskResult, candidates: int):
        """Up to ``candidates`` distinct programs from the donors, and a 1x1 convolution's matrix-product schedules
        (donor None) beside them, timed together (built on every core at once); the fastest that ran and computes the
        task: (donor, schedule, timing), or None. Neither kind wins every 1x1 convolution, so both are timed
        (docs/BENCHMARKS.md, "A new user's first transfer of a YOLO")."""
        # a donor record that is the default schedule makes the program the task's default was timed as already
        donors = [d for d in donors if not _is_default(d)]
        with self.clock("donors"):
            picked: list = [(None, sch) for sch in matrix_product_seeds(task.mod, self.target)]
            if self.predictor is None:
                picked += self.schedules.distinct(task.mod, donors, candidates, resample=candidates)
            else:
                picked += self._ranked(task, donors, candidates)
        with self.clock("measure"):
            timings = self.run.measurer.kernels([module_job(sch.mod, self.target, task.arguments) for _, sch in picked])
        result.candidates = len(picked)
        for (donor, sch), timing in zip(picked, timings, strict=True):
            # the tuning engine adds the matrix-product seeds itself: given again, they took donors' seed places
            if timing.ok and donor is not None:
                self.tried.setdefault(task.workload_id, []).append(sch)
        check = output_check(task.mod, self.target, self.run.measurer)  # the fastest that computes the task
        for k in sorted((k for k, t in enumerate(timings) if t.ok), key=lambda k: timings[k].median_s):
            donor, sch = picked[k]
            if check is None or check.problem(sch.mod) is None:
                return donor, sch, timings[k]
        return None

    def _ranked(self, task: RunTask, donors: list[Donor], candidates: int) -> list:
        """The donors' distinct programs (up to ``RANKED``) in the predictor's order, as many of the first as its
        held-out score warrants measuring (``LoadedPredictor.warranted``), at most ``candidates``."""
        pool = self.schedules.distinct(task.mod, donors, max(RANKED, candidates), resample=max(RANKED, candidates))
        if len(pool) < 2:
            return pool
        with self.clock("search"):
            try:
                scores = scores_of(self.predictor.model, task.mod, self.target, task.name, [sch for _, sch in pool])
            except TVM_ERRORS:  # features that cannot be read: the donors' own order
                return pool[:candidates]
        order = sorted(range(len(pool)), key=lambda i: -scores[i])
        return [pool[i] for i in order[: self.predictor.warranted(candidates)]]

    def ranking(self) -> dict | None:
        """Which predictor ranked the donors' schedules, as the report says it (None: none did)."""
        if self.predictor is None:
            return None
        return {
            "version": self.predictor.version,
            "sibling": self.predictor.sibling,
            "trained_on": self.predictor.metrics.get("trained_on"),
            "top1": scores_at(self.predictor.metrics, "held_out").get("top1"),
            "unseen_top1": unseen_top1(self.predictor.metrics),
            "measured": self.predictor.warranted(self.opts.candidates),
        }

    def _commit(self, task: RunTask, donor: Donor | None, sch, timing: Measurement, source: str) -> str | None:
        """Store the winner as ``source`` through the registry's one check; why it was refused, if it was."""
        record = RecordIn(
            workload=task.ident,
            device=self.tvm_database.device,
            trace=apply_trace.trace_json(sch),
            run_secs=timing.run_secs,
            source=source,
            tool_version=hostinfo.tool_version(),
            donor_record_id=donor.record.id if donor is not None else None,
            team=self.opts.team,
            model=self.model,
            host=hostinfo.hostname(),
        )
        refused = self.writer.write([record]).refused
        return refused[0][1].reason if refused else None
