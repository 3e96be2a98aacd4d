"""The tuning loop: MetaSchedule's evolutionary search, one batch at a time, over a model's tasks.

MetaSchedule's own ``tune_tasks`` runs the search, the builder, the runner and the cost model in C++ and only stops
at a trial count. Here the same pieces are driven batch by batch from Python, so that between batches the registry
decides (``registry.pipeline.tuning_policy``) which task goes next and which stop, and each batch:

1. proposes candidates with the task's ``EvolutionarySearch``, ranked by the cost model; with a predictor
   pre-trained on the registry (``registry predictor train``) that ranking is informed from the first trial;
2. drops the predicted-worst share of them unmeasured (``TrimOptions.keep``), and takes the latency of any
   candidate already stored on this device from the registry instead of measuring it again (resume);
3. builds the rest in the persistent builder pool and measures them ``dop`` at a time through the run's measurer
   (``registry.measure``), then measures again, alone and precisely, those that could become the task's best;
4. writes every measured record to the registry at once, then updates the cost model and the search.

Search is seeded with donor schedules, found when a task's first batch comes: the registry's donors, and the tasks
this run tuned before it (``donor_schedules.RunDonors``). They are measured and stored before that batch, and the
evolutionary search starts from the task's best stored records.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field

from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.s_tir.schedule import Schedule

from registry import hostinfo
from registry.errors import RegistryWarning
from registry.measure.builder import PersistentBuilder, usable_cores
from registry.measure.calibrate import TOLERANCE, Calibration
from registry.measure.jobs import artifact_job
from registry.measure.types import KernelJob, Measurement
from registry.pipeline.donor_schedules import RunDonors
from registry.pipeline.effort import DEFAULT_LEASE_S, DEFAULT_WINDOW, Leases, plateaued
from registry.pipeline.model_run import ModelRun, Progress, Task, default_record
from registry.pipeline.rules import rules_with_producers_inlined
from registry.pipeline.tuning_policy import Budget, Planner, TaskState, TrimOptions
from registry.records.database import RegistryDatabase
from registry.records.write import RecordWriter
from registry.store.interface import RecordIn, record_trace_hash
from registry.store.rows import FAILED_RUN_SECS
from registry.tvm_side.apply_trace import trace_json
from registry.tvm_side.compat import META_SCHEDULE_LOGGER, TVM_ERRORS, error_line, last_line, prepare_tuning
from registry.tvm_side.compile import scheduled_arguments
from registry.tvm_side.gemm_schedules import matrix_product_seeds
from registry.tvm_side.output_check import output_check
from registry.verbosity import meta_schedule_level

# A quick time may be up to the calibration's tolerance off: within that of the task's best, a candidate may become
# the best, so it is re-measured precisely.
RECHECK_MARGIN = 1 + TOLERANCE


@dataclass
class TuneOptions:
    trials: int | None = None  # measured candidates across the model, counting those stored by earlier runs
    seconds: float | None = None  # wall time of this run's tuning (run()'s deadline replaces it)
    batch: int = 16  # candidates proposed per batch
    population: int = 128  # EvolutionarySearch population (MetaSchedule's default is 512)
    genetic_iters: int = 2  # EvolutionarySearch generations per batch (default 4)
    # MetaSchedule's share of each batch picked from fresh design-space samples rather than evolved: it truncates
    # batch x eps_greedy, so at the batch of 16 this picks none (every candidate is evolved). Two fresh samples per
    # batch, measured whatever the cost model predicts, did not free MobileNetV2's depthwise searches after pull
    # (docs/BENCHMARKS.md, "Fresh samples in each batch"): not kept.
    eps_greedy: float = 0.05
    trim: TrimOptions = field(default_factory=TrimOptions)
    use_predictor: bool = True  # start from the device's stored predictor, if it has one
    seeds: int = 4  # donor schedules measured per task before its first batch
    seed: int = 1
    plateau_window: int = DEFAULT_WINDOW  # trials: a task whose last ones gained under 1% has plateaued
    retune: bool = False  # tune plateaued tasks too
    lease_s: float = DEFAULT_LEASE_S  # how long a task stays leased to this run after its last batch


@dataclass
class EngineTask:
    task: Task
    default_us: float | None
    seed_schedules: list[Schedule] = field(default_factory=list)
    default_error: str | None = None  # why the default schedule did not run, when it did not


@dataclass
class Outcome:
    states: dict[int, TaskState]  # by workload id
    calibration: Calibration | None
    predictor_version: int | None
    measurer: str  # "local" or "rpc"
    measured: str  # where and how, in words
    dop: int
    stop: str
    # After the start and each batch: {seconds, trials, task, best_us: {task: µs or None}, model_us}
    history: list[dict] = field(default_factory=list)
    # the trial budget: {"asked": --trials, "stored": trials stored by earlier runs, "measured": by this run,
    # "others": by runs beside it}; None with only a time budget
    trials: dict[str, int] | None = None
    waited_s: float = 0.0  # spent waiting for tasks that other runs held
    predictor_from: str | None = None  # the sibling device whose predictor ranked candidates (None: this device's)


class Engine:
    def __init__(
        self,
        run: ModelRun,
        db: RegistryDatabase,
        options: TuneOptions,
        team: str | None = None,
        progress: Progress = lambda _done, _total, _what: None,  # (trials spent, trial budget or 0, what now)
        donors: RunDonors | None = None,  # seeds for a task with none of its own, found when its first batch comes
    ) -> None:
        self.model_run, self.store, self.db, self.target, self.opts = run, run.store, db, run.target, options
        self.donors = donors
        self.clock, self.model, self.team, self.progress = run.clock, run.loaded.name, team, progress
        self.measurer = run.measurer
        prepare_tuning(self.target.kind.name)
        logging.getLogger(META_SCHEDULE_LOGGER).setLevel(meta_schedule_level())
        self.builder = PersistentBuilder()
        self.writer = RecordWriter(self.store)
        self.cost_model, self.predictor_version = self._cost_model()
        self._stored_traces: dict[int, dict[str, list[float]]] = {}  # by workload id, read once per run
        self.leases = Leases(self.store, db.device_id, options.plateau_window, options.lease_s, options.retune)
        self._effort_start: dict[int, int] = {}  # each task's effort in trials when this run began
        self.waited_s = 0.0

    def _cost_model(self):
        """The device's stored predictor, else a sibling device's (until this one has its own), else a fresh
        XGBModel; with the predictor's version, and says whose it is (``predictor_from``)."""
        self.predictor_from = None
        if self.opts.use_predictor:
            from registry.tvm_side.predictor import load_predictor, sibling_predictor

            loaded = load_predictor(self.store, self.db.device_id)
            if loaded is not None:
                return loaded
            sibling = sibling_predictor(self.store, self.db.device_id)
            if sibling is not None:
                model, version, self.predictor_from = sibling
                return model, version
        return ms.cost_model.XGBModel(num_tuning_cores=usable_cores()), None

    def close(self) -> None:
        try:
            self.leases.release_all()
        finally:
            self.builder.shutdown()

    # -- the model -------------------------------------------------------------------------------------------------

    def run(self, tasks: list[EngineTask], deadline: float | None = None) -> Outcome:
        """Tune ``tasks`` until the budget is spent or every task stopped. ``deadline`` (``time.perf_counter()``):
        when a time budget's tuning must end, which then replaces ``seconds``."""
        start = time.perf_counter()
        seconds = self.opts.seconds if deadline is None else max(0.0, deadline - start)
        tuners: dict[int, _TaskTuner] = {}
        states = {t.task.workload_id: self._state(t) for t in tasks}
        by_id = {t.task.workload_id: t for t in tasks}
        planner = Planner(list(states.values()), Budget(self.opts.trials, seconds), self.opts.trim)
        ids = {id(s): wid for wid, s in states.items()}
        budget = self.opts.trials or 0
        self._skip_plateaued(states)
        history = [self._point(start, states, planner, None)]
        while True:
            state = planner.next_task(time.perf_counter() - start)
            if state is None:
                if planner.stop is None and planner.waiting() and self._wait(planner, states, start, seconds):
                    continue
                break
            wid = ids[id(state)]
            newly = wid not in self.leases.held
            other = self.leases.take(wid, state.best_us)
            if other is not None:  # another run tunes it: leave it to that run
                state.held_by = other
                continue
            if newly:  # what other runs measured of it since this run read it: not measured again
                fresh = self.store.tuning_state(wid, self.db.device_id).traces
                (tuners[wid].stored if wid in tuners else self._stored_traces[wid]).update(fresh)
            t0 = time.perf_counter()
            before = state.best_us
            done = True  # the search space has more
            if wid not in tuners:
                try:
                    tuners[wid] = self._start(by_id[wid], state, planner)
                except TVM_ERRORS as e:
                    # neither MetaSchedule's rules nor the fallback of rules.py build a design space for it: that
                    # task keeps its schedule, the others are tuned
                    state.stopped = f"MetaSchedule cannot build its design space: {error_line(e)[:200]}"
                    self._settle(wid, state, time.perf_counter() - t0, exhausted=False)
                    continue
                seeded = _faster(state.best_us, before) and _faster(state.best_us, by_id[wid].default_us)
            else:
                seeded = False
            # A task whose donors' schedules beat what it had has had its first batch: the search's first costs 3-4
            # times as many builds, and under a budget of minutes a CNN's 60 tasks did not all get one (a YOLOv8n:
            # 27 of 60 kept TVM's default schedule, 10-50x slower than tuned, after 10 minutes).
            if not seeded:
                done = self._search(tuners, wid, state, planner, t0, states)
                if done is None:
                    continue
            if not done:
                state.stopped = "search space exhausted"
            seconds_spent = time.perf_counter() - t0
            planner.record_batch(state, before, seconds_spent)
            if self.donors is not None and state.best_us is not None:
                self.donors.tuned(by_id[wid].task)
            self._settle(wid, state, seconds_spent, exhausted=not done)
            self._release_stopped(states)
            self._refresh(states)
            history.append(self._point(start, states, planner, state.name))
        for tuner in tuners.values():
            try:
                tuner.ctx.post_tuning()
            except TVM_ERRORS:
                pass  # a search that failed above may fail to close; nothing of it is needed any more
        self.keep_defaults([by_id[wid] for wid in tuners], states)
        stop = planner.stop or "every task stopped"
        self.progress(self._spent(states), budget, stop)
        trials = None
        if self.opts.trials:
            trials = {
                "asked": self.opts.trials,
                "stored": sum(s.stored for s in states.values()),
                "measured": sum(s.measurements for s in states.values()),
                "others": sum(s.others for s in states.values()),
            }
        return Outcome(
            states,
            self.measurer.calibration,
            self.predictor_version,
            self.measurer.kind,
            self.measurer.summary(),
            self.measurer.dop,
            stop,
            history,
            trials,
            self.waited_s,
            self.predictor_from,
        )

    def _search(self, tuners: dict, wid: int, state: TaskState, planner: Planner, t0: float, states) -> bool | None:
        """One batch of the task's search: whether its space has more. None where the search failed: it restarts, or
        the task stops."""
        self.progress(self._spent(states), self.opts.trials or 0, f"{state.name}: batch {state.batches + 1}")
        try:
            return tuners[wid].batch(state, planner.trials_left())
        except TVM_ERRORS as e:
            # MetaSchedule's search replays stored and mutated traces outside its own error handling, and one check
            # failure there ended the whole command (a resumed ResNet, right after each task's donor seeds were
            # measured: "old_outputs.size() == new_outputs.size()"). The task's search starts again without the
            # database's records in its population; if that fails too, the task keeps what it has measured and the
            # others go on.
            if tuners[wid].from_database:
                tuners[wid] = tuners[wid].restarted_without_database()
                return None
            state.stopped = f"MetaSchedule's search failed: {error_line(e)[:200]}"
            self._settle(wid, state, time.perf_counter() - t0, exhausted=False)
            return None

    # -- runs beside this one (registry.pipeline.effort) ----------------------------------------------------------

    def _skip_plateaued(self, states: dict[int, TaskState]) -> None:
        """Stop the tasks whose recorded effort reached a plateau (unless --retune), and note every task's effort."""
        for wid, effort in self.leases.read(list(states)).items():
            self._effort_start[wid] = effort.trials
            # plateaued by the rule a run recorded, or by this run's window (``--plateau``) on the recorded curve
            if (effort.plateau or plateaued(effort.curve, self.opts.plateau_window)) and not self.opts.retune:
                states[wid].stopped = f"plateaued after {effort.trials} recorded trials (--retune searches on)"

    def _settle(self, wid: int, state: TaskState, seconds: float, exhausted: bool) -> None:
        """Record a batch's effort on the task, renew this run's leases, and stop the task if it plateaued or another
        run took it over."""
        done = state.stopped is not None
        kept, plateau = self.leases.after_batch(wid, state.measurements, seconds, state.best_us, exhausted, done)
        if not kept and not done:
            state.stopped = "taken over by another run: this run's lease on it expired"
        elif plateau and not done and not self.opts.retune:
            state.stopped = f"plateaued: its last {self.opts.plateau_window} trials gained under 1%"
        self.leases.renew()

    def _release_stopped(self, states: dict[int, TaskState]) -> None:
        """Release the leases of the tasks a batch of another task stopped (the share rule pauses any task whose
        share of the model fell): held while paused, two runs could each wait for the other's paused task."""
        for wid in [w for w in self.leases.held if states[w].stopped is not None]:
            self.leases.release(wid, states[wid].measurements)

    def _refresh(self, states: dict[int, TaskState]) -> None:
        """What other runs did since: their trials count against the budget, their bests are the model's, and a task
        they released or left to expire is free again (stopped if it plateaued)."""
        now = dt.datetime.now(dt.UTC)
        for wid, effort in self.leases.read(list(states)).items():
            state = states[wid]
            state.others = max(0, effort.trials - self._effort_start.get(wid, 0) - self.leases.saved.get(wid, 0))
            if effort.best_us is not None and (state.best_us is None or effort.best_us < state.best_us):
                state.best_us = effort.best_us
            if state.held_by is not None and effort.held_by_other(self.leases.holder, now) is None:
                state.held_by = None
                if effort.plateau and not self.opts.retune and state.stopped is None:
                    state.stopped = f"plateaued in another run after {effort.trials} recorded trials"

    def _wait(self, planner: Planner, states: dict[int, TaskState], start: float, seconds: float | None) -> bool:
        """Wait while every task left is another run's, until one is free again (True) or the time budget ends."""
        held = planner.waiting()
        runs = sorted({t.held_by for t in held if t.held_by})
        self.progress(
            self._spent(states), self.opts.trials or 0, f"waiting for {len(held)} task(s) tuned by {', '.join(runs)}"
        )
        poll = min(5.0, max(0.5, self.opts.lease_s / 10))
        while True:
            if seconds is not None and time.perf_counter() - start + poll > seconds:
                planner.stop = f"time budget spent ({seconds:.0f} s of tuning) waiting for other runs"
                return False
            time.sleep(poll)
            self.waited_s += poll
            self.leases.renew()
            self._refresh(states)
            if len(planner.waiting()) < len(held):
                return True

    def keep_defaults(self, tasks: list[EngineTask], states: dict[int, TaskState]) -> None:
        """File the default schedule of each task whose measured candidates all lost to it, so that compiling keeps
        the default (``model_run.default_record``; on a GPU nothing is filed)."""
        filed = {}
        for t in tasks:
            state = states[t.task.workload_id]
            if t.default_us is None or (state.best_us is not None and state.best_us <= t.default_us):
                continue
            record = default_record(self.model_run, t.task, t.default_us, self.team)
            if record is not None:
                filed[id(record)] = (record, state, t.default_us)
        refused = {id(r) for r, _ in self.writer.write([r for r, _, _ in filed.values()]).refused} if filed else set()
        for key, (_, state, default_us) in filed.items():
            if key not in refused:
                state.best_us = default_us

    def _point(self, start: float, states: dict[int, TaskState], planner: Planner, task: str | None) -> dict:
        """One point of the run's history: where the tuning stands after a batch (of ``task``; None: the start)."""
        return {
            "seconds": round(time.perf_counter() - start, 3),
            "trials": self._spent(states),
            "task": task,
            "best_us": {s.name: s.best_us for s in states.values()},
            "model_us": planner.model_us(),
        }

    @staticmethod
    def _spent(states: dict[int, TaskState]) -> int:
        return sum(s.measured for s in states.values())

    def _state(self, t: EngineTask) -> TaskState:
        stored = self.store.tuning_state(t.task.workload_id, self.db.device_id)
        best = self.store.top_k(t.task.workload_id, self.db.device_id, 1)
        self._stored_traces[t.task.workload_id] = stored.traces  # what the task's tuner will not measure again
        return TaskState(
            t.task.name,
            t.task.weight,
            t.default_us,
            best_us=best[0].mean_s * 1e6 if best else None,
            stored=stored.tuned,
        )

    def _start(self, t: EngineTask, state: TaskState, planner: Planner) -> _TaskTuner:
        tuner = _TaskTuner(self, t.task, self._stored_traces[t.task.workload_id])
        seeds = t.seed_schedules or (self.donors.seeds(t.task) if self.donors is not None else [])
        # A 1x1 convolution's matrix-product schedules first: nearer MLAS's speed than its donors' or a search's
        # first batches reach in minutes (tvm_side/gemm_schedules.py).
        seeds = matrix_product_seeds(t.task.mod, self.target) + seeds
        if seeds:
            seeds = seeds[: self.opts.seeds]
            left = planner.trials_left()
            if left is not None:
                seeds = seeds[:left]
            state.trials += len(seeds)
            tuner.measure_and_commit(state, [tuner.candidate(s) for s in seeds])
        return tuner


def _faster(us: float | None, than: float | None) -> bool:
    """Whether a latency is known and beats another (any, where that is unknown)."""
    return us is not None and (than is None or us < than)


class _TaskTuner:
    """One task's TuneContext and search state, advanced one batch at a time."""

    def __init__(self, engine: Engine, task: Task, stored: dict[str, list[float]], from_database: bool = True) -> None:
        """``stored``: trace hash -> run_secs of the records earlier runs left for this task on this device.
        ``from_database``: whether the search's first population takes the task's best stored records (MetaSchedule's
        default), or only samples of its design spaces."""
        self.engine, self.task, self.stored, self.from_database = engine, task, stored, from_database
        opts = engine.opts
        with engine.clock("search"):
            try:
                self.ctx, spaces = self._context("post-order-apply")
            except TVM_ERRORS:
                # MetaSchedule's own rules fail on some fused workloads; try again with input-only producers
                # inlined first (see rules.py). If that fails too, the engine stops this task with the reason.
                generator = ms.space_generator.PostOrderApply(
                    sch_rules=rules_with_producers_inlined(engine.target),
                    postprocs="from-target",
                    mutator_probs="from-target",
                )
                self.ctx, spaces = self._context(generator)
            self.ctx.pre_tuning(
                max_trials=1 << 30,  # the planner decides when to stop
                num_trials_per_iter=opts.batch,
                design_spaces=spaces,
                database=engine.db,
                cost_model=engine.cost_model,
            )
        self.seen: set[str] = set()
        self.output_check = output_check(task.mod, engine.target, engine.measurer)

    def restarted_without_database(self) -> _TaskTuner:
        """The same task's search begun again with a population sampled from its design spaces only; what this one
        measured is not measured again."""
        fresh = _TaskTuner(self.engine, self.task, self.stored, from_database=False)
        fresh.seen, fresh.output_check = self.seen, self.output_check
        return fresh

    def _context(self, space_generator):
        """A TuneContext for the task and its design spaces; raises what TVM raises when they cannot be built."""
        opts = self.engine.opts
        ctx = ms.TuneContext(
            mod=self.task.mod,
            target=self.engine.target,
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
        return ctx, ctx.generate_design_space()

    def candidate(self, sch: Schedule) -> MeasureCandidate:
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        return MeasureCandidate(sch, ArgInfo.from_prim_func(next(iter(sch.mod.functions.values()))))

    def batch(self, state: TaskState, trials_left: int | None) -> bool:
        """One batch; False when the search has nothing left to propose."""
        with self.engine.clock("search"):
            proposed = self.ctx.generate_measure_candidates()
        if not proposed:
            return False
        proposed = list(proposed)
        kept, dropped = self._trim(proposed)
        if trials_left is not None and len(kept) > trials_left:
            kept, dropped = kept[:trials_left], dropped + kept[trials_left:]
        state.trials += len(proposed)
        results = self.measure_and_commit(state, kept)
        trimmed = [RunnerResult(None, "not measured: predicted poor") for _ in dropped]
        with self.engine.clock("search"):
            self.ctx.notify_runner_results(kept + dropped, results + trimmed)
        return True

    def _trim(self, proposed: list[MeasureCandidate]) -> tuple[list[MeasureCandidate], list[MeasureCandidate]]:
        """Drop the predicted-worst share of a batch, once the cost model has been trained on anything."""
        model = self.engine.cost_model
        keep = max(1, round(len(proposed) * self.engine.opts.trim.keep))
        if keep >= len(proposed) or getattr(model, "booster", None) is None:
            return proposed, []
        with self.engine.clock("search"):
            scores = model.predict(self.ctx, proposed)
        order = sorted(range(len(proposed)), key=lambda i: -scores[i])
        return [proposed[i] for i in order[:keep]], [proposed[i] for i in order[keep:]]

    def measure_and_commit(self, state: TaskState, cands: list[MeasureCandidate]) -> list[RunnerResult]:
        """Results for ``cands`` in order: stored ones from the registry, the others built, measured, committed."""
        engine = self.engine
        results: list[RunnerResult | None] = [None] * len(cands)
        traces = [trace_json(c.sch) for c in cands]
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
        if todo:
            measured = self._build_and_measure([cands[i] for i in todo], state)
            refused = self._commit([traces[i] for i in todo], measured)
            for k, why in refused.items():  # not stored, so never a best: the search learns it as a failure
                measured[k] = RunnerResult(None, f"not stored: {why}")
            for i, r in zip(todo, measured, strict=True):
                results[i] = r
            state.measurements += len(todo)
            with engine.clock("search"):  # the cost model learns from what was measured
                engine.cost_model.update(self.ctx, [cands[i] for i in todo], measured)
        for r in results:
            if r.error_msg is None and r.run_secs:
                us = mean_us(r)
                if state.best_us is None or us < state.best_us:
                    state.best_us = us
        return results

    def _build_and_measure(self, cands: list[MeasureCandidate], state: TaskState) -> list[RunnerResult]:
        engine = self.engine
        with engine.clock("measure"):
            built = engine.builder.build([BuilderInput(c.sch.mod, engine.target) for c in cands])
            results = [Measurement((), f"build failed: {last_line(b.error_msg, 'unknown error')}") for b in built]
            jobs = {
                i: artifact_job(b.artifact_path, scheduled_arguments(self.task.arguments, cands[i].sch.mod))
                for i, b in enumerate(built)
                if not b.error_msg
            }
            for i, m in zip(jobs, engine.measurer.measure(list(jobs.values())), strict=True):
                results[i] = m
            self._recheck(results, jobs, state, cands)
            for b in built:
                if b.artifact_path:
                    shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
        return [RunnerResult(list(m.run_secs) if m.ok else None, m.error) for m in results]

    def _recheck(
        self, results: list[Measurement], jobs: dict[int, KernelJob], state: TaskState, cands: list[MeasureCandidate]
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
            wrong = self.output_check.problem(cands[i].sch.mod) if self.output_check is not None else None
            if wrong is not None:
                results[i] = Measurement((), wrong)
                continue
            [results[i]] = self.engine.measurer.recheck([jobs[i]])
            checked.append(results[i].median_s)

    def _commit(self, traces: list, results: list[RunnerResult]) -> dict[int, str]:
        """Store every measured record through the registry's one check; the refused ones by position, with why.
        A refusal is a bug of the tuning path (a trace not made on the stored workload), so each is also warned of."""
        engine = self.engine
        records = [
            RecordIn(
                workload=self.task.ident,
                device=engine.db.device,
                trace=trace,
                run_secs=tuple(_run_secs(r)) or (FAILED_RUN_SECS,),
                source="tuned",
                tool_version=hostinfo.tool_version(),
                team=engine.team,
                model=engine.model,
                host=hostinfo.hostname(),
            )
            for trace, r in zip(traces, results, strict=True)
        ]
        written = engine.writer.write(records)
        refused = {id(r): why.reason for r, why in written.refused}
        for why in list(refused.values())[:1]:
            warnings.warn(
                f"{self.task.name}: {len(refused)} of {len(records)} tuned record(s) refused, not stored: {why}",
                RegistryWarning,
                stacklevel=2,
            )
        return {k: refused[id(r)] for k, r in enumerate(records) if id(r) in refused}


def _run_secs(result: RunnerResult) -> list[float]:
    """A result's seconds as Python floats (TVM hands them back as FloatImm), empty if it failed."""
    return [float(s) for s in result.run_secs] if result.error_msg is None and result.run_secs else []


def mean_us(result: RunnerResult) -> float:
    """The latency a record is ranked by in the store (the mean of its run_secs), in µs."""
    secs = _run_secs(result)
    return sum(secs) / len(secs) * 1e6
