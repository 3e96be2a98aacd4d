"""The tuning loop: MetaSchedule's evolutionary search, one batch at a time, over a model's tasks.

MetaSchedule's own ``tune_tasks`` runs the search, the builder, the runner and the cost model in C++ and only stops
at a trial count. Here the same pieces are driven batch by batch from Python, so that between batches the registry
decides (``registry.pipeline.tuning_policy``) which task goes next and which stop, and each batch of a task's search
(``registry.pipeline.task_search``):

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
import time
from dataclasses import dataclass, field

from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Schedule

from registry.measure.builder import PersistentBuilder, usable_cores
from registry.measure.calibrate import Calibration
from registry.pipeline.donor_schedules import RunDonors
from registry.pipeline.effort import Leases, plateaued
from registry.pipeline.model_run import ModelRun, Progress, RunTask, default_record
from registry.pipeline.task_search import (
    BatchEnd,
    CommitRecords,
    SearchContext,
    TaskSearch,
    UpdateCostModel,
    refused_positions,
)
from registry.pipeline.tuning_policy import Budget, EngineOptions, Planner, TaskState
from registry.records.database import RegistryDatabase
from registry.records.write import RecordWriter
from registry.tvm_side.compat import META_SCHEDULE_LOGGER, TVM_ERRORS, error_line, prepare_tuning
from registry.tvm_side.gemm_schedules import matrix_product_seeds
from registry.verbosity import meta_schedule_level


@dataclass
class EngineTask:
    task: RunTask
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


@dataclass
class _Tuning:
    """One call of ``Engine.run``: its tasks and their states by workload id, the planner over them, each task's search
    once started, and the history so far."""

    tasks: dict[int, EngineTask]
    states: dict[int, TaskState]
    planner: Planner
    start: float  # time.perf_counter() when the run began
    seconds: float | None  # the time budget of the tuning
    searches: dict[int, TaskSearch] = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def spent(self) -> int:
        """Measured candidates across the tasks, earlier and concurrent runs' included: what the trial budget counts."""
        return sum(s.measured for s in self.states.values())


class Engine:
    def __init__(
        self,
        run: ModelRun,
        tvm_database: RegistryDatabase,
        options: EngineOptions,
        team: str | None = None,
        progress: Progress = lambda _done, _total, _what: None,  # (trials spent, trial budget or 0, what now)
        donors: RunDonors | None = None,  # seeds for a task with none of its own, found when its first batch comes
    ) -> None:
        self.model_run, self.storage, self.tvm_database = run, run.storage, tvm_database
        self.target, self.opts, self.team, self.progress, self.donors = run.target, options, team, progress, donors
        self.measurer = run.measurer
        prepare_tuning(self.target.kind.name)
        logging.getLogger(META_SCHEDULE_LOGGER).setLevel(meta_schedule_level())
        self.builder = PersistentBuilder()
        self.writer = RecordWriter(self.storage)
        self.cost_model, self.predictor_version = self._cost_model()
        self.search_context = SearchContext(
            target=self.target,
            tvm_database=tvm_database,
            cost_model=self.cost_model,
            builder=self.builder,
            measurer=run.measurer,
            clock=run.clock,
            options=options,
            after_measuring=[
                CommitRecords(self.writer, tvm_database.device, team, run.loaded.name),
                UpdateCostModel(self.cost_model, run.clock),
            ],
        )
        # by workload id, read once per run: what a task's search will not measure again (shared with the search)
        self._stored_traces: dict[int, dict[str, list[float]]] = {}
        self.leases = Leases(
            self.storage, tvm_database.device_id, options.plateau_window, options.lease_s, options.retune
        )
        self._effort_start: dict[int, int] = {}  # each task's effort in trials when this run began
        self.waited_s = 0.0

    def _cost_model(self):
        """The device's stored predictor, else a sibling device's (until this one has its own), else a fresh
        XGBModel; with the predictor's version, and says whose it is (``predictor_from``)."""
        self.predictor_from = None
        if self.opts.use_predictor:
            found = self.model_run.predictor()
            if found is not None:
                self.predictor_from = found.sibling
                return found.model, found.version
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
        states = {t.task.workload_id: self._state(t) for t in tasks}
        planner = Planner(list(states.values()), Budget(self.opts.trials, seconds), self.opts.trim)
        tuning = _Tuning({t.task.workload_id: t for t in tasks}, states, planner, start, seconds)
        self._skip_plateaued(states)
        tuning.history.append(self._point(tuning, None))
        while (state := self._next_task(tuning)) is not None:
            if self._lease(state):
                self._turn(state, tuning)
        for search in tuning.searches.values():
            search.close()
        self.keep_defaults([tuning.tasks[wid] for wid in tuning.searches], states)
        stop = planner.stop or "every task stopped"
        self.progress(tuning.spent(), self.opts.trials or 0, stop)
        return self._outcome(tuning, stop)

    def _next_task(self, tuning: _Tuning) -> TaskState | None:
        """The task the planner gives the next batch, waiting for other runs' tasks when only theirs are left; None
        when the tuning is over."""
        planner = tuning.planner
        while True:
            state = planner.next_task(tuning.elapsed())
            if state is not None:
                return state
            if planner.stop is not None or not planner.waiting() or not self._wait(tuning):
                return None

    def _lease(self, state: TaskState) -> bool:
        """Take (or renew) this run's lease on the task; False, the task marked held, where another run tunes it."""
        wid = state.workload_id
        newly = wid not in self.leases.held
        other = self.leases.take(wid, state.best_us)
        if other is not None:  # another run tunes it: leave it to that run
            state.held_by = other
            return False
        if newly:  # what other runs measured of it since this run read it: not measured again
            self._stored_traces[wid].update(self.storage.tuning_state(wid, self.tvm_database.device_id).traces)
        return True

    def _turn(self, state: TaskState, tuning: _Tuning) -> None:
        """One turn of a task: its search started (measuring its donor seeds) or one batch of it, then accounted."""
        began, best_before = time.perf_counter(), state.best_us
        end = self._start_or_search(state, tuning)
        if end is BatchEnd.RESTARTED:
            return
        if end is BatchEnd.STOPPED:
            self._settle(state, time.perf_counter() - began, exhausted=False)
            return
        if end is BatchEnd.EXHAUSTED:
            state.stopped = "search space exhausted"
        seconds = time.perf_counter() - began
        tuning.planner.record_batch(state, best_before, seconds)
        if self.donors is not None and state.best_us is not None:
            self.donors.tuned(tuning.tasks[state.workload_id].task)
        self._settle(state, seconds, exhausted=end is BatchEnd.EXHAUSTED)
        self._release_stopped(tuning.states)
        self._refresh(tuning.states)
        tuning.history.append(self._point(tuning, state.name))

    def _start_or_search(self, state: TaskState, tuning: _Tuning) -> BatchEnd:
        """Start the task's search if this is its first turn, else search one batch.

        A task whose donors' schedules beat what it had has had its first batch: the search's first costs 3-4 times
        as many builds, and under a budget of minutes a CNN's 60 tasks did not all get one (27 of 60 kept TVM's
        default schedule, 10-50x slower than tuned, after 10 minutes)."""
        if state.workload_id in tuning.searches:
            return self._search(state, tuning)
        task, best_before = tuning.tasks[state.workload_id], state.best_us
        try:
            tuning.searches[state.workload_id] = self._start(task, state, tuning.planner)
        except TVM_ERRORS as e:
            # neither MetaSchedule's rules nor the fallback of rules.py build a design space for it: that task keeps
            # its schedule, the others are tuned
            state.stopped = f"MetaSchedule cannot build its design space: {error_line(e)[:200]}"
            return BatchEnd.STOPPED
        if _faster(state.best_us, best_before) and _faster(state.best_us, task.default_us):
            return BatchEnd.MEASURED
        return self._search(state, tuning)

    def _search(self, state: TaskState, tuning: _Tuning) -> BatchEnd:
        """One batch of the task's search.

        MetaSchedule's search replays stored and mutated traces outside its own error handling, where one failed check
        ("old_outputs.size() == new_outputs.size()") would end the whole command. A search that fails starts again
        without the database's records in its population; if that fails too, the task keeps what it has measured and
        the others go on."""
        self.progress(tuning.spent(), self.opts.trials or 0, f"{state.name}: batch {state.batches + 1}")
        search = tuning.searches[state.workload_id]
        try:
            return search.batch(state, tuning.planner.trials_left())
        except TVM_ERRORS as e:
            if search.from_database:
                tuning.searches[state.workload_id] = search.restarted_without_database()
                return BatchEnd.RESTARTED
            state.stopped = f"MetaSchedule's search failed: {error_line(e)[:200]}"
            return BatchEnd.STOPPED

    def _outcome(self, tuning: _Tuning, stop: str) -> Outcome:
        states = tuning.states.values()
        trials = None
        if self.opts.trials:
            trials = {
                "asked": self.opts.trials,
                "stored": sum(s.stored for s in states),
                "measured": sum(s.measurements for s in states),
                "others": sum(s.others for s in states),
            }
        return Outcome(
            states=tuning.states,
            calibration=self.measurer.calibration,
            predictor_version=self.predictor_version,
            measurer=self.measurer.kind,
            measured=self.measurer.summary(),
            dop=self.measurer.dop,
            stop=stop,
            history=tuning.history,
            trials=trials,
            waited_s=self.waited_s,
            predictor_from=self.predictor_from,
        )

    # -- runs beside this one (registry.pipeline.effort) ----------------------------------------------------------

    def _skip_plateaued(self, states: dict[int, TaskState]) -> None:
        """Stop the tasks whose recorded effort reached a plateau (unless --retune), and note every task's effort."""
        for wid, effort in self.leases.read(list(states)).items():
            self._effort_start[wid] = effort.trials
            # plateaued by the rule a run recorded, or by this run's window (``--plateau``) on the recorded curve
            if (effort.plateau or plateaued(effort.curve, self.opts.plateau_window)) and not self.opts.retune:
                states[wid].stopped = f"plateaued after {effort.trials} recorded trials (--retune searches on)"

    def _settle(self, state: TaskState, seconds: float, exhausted: bool) -> None:
        """Record a batch's effort on the task, renew this run's leases, and stop the task if it plateaued or another
        run took it over."""
        stopped = state.stopped is not None
        kept, plateau = self.leases.after_batch(
            state.workload_id, state.measurements, seconds, state.best_us, exhausted, stopped
        )
        if not kept and not stopped:
            state.stopped = "taken over by another run: this run's lease on it expired"
        elif plateau and not stopped and not self.opts.retune:
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

    def _wait(self, tuning: _Tuning) -> bool:
        """Wait while every task left is another run's, until one is free again (True) or the time budget ends."""
        planner, seconds = tuning.planner, tuning.seconds
        held = planner.waiting()
        runs = sorted({t.held_by for t in held if t.held_by})
        self.progress(
            tuning.spent(), self.opts.trials or 0, f"waiting for {len(held)} task(s) tuned by {', '.join(runs)}"
        )
        poll = min(5.0, max(0.5, self.opts.lease_s / 10))
        while True:
            if seconds is not None and tuning.elapsed() + poll > seconds:
                planner.stop = f"time budget spent ({seconds:.0f} s of tuning) waiting for other runs"
                return False
            time.sleep(poll)
            self.waited_s += poll
            self.leases.renew()
            self._refresh(tuning.states)
            if len(planner.waiting()) < len(held):
                return True

    def keep_defaults(self, tasks: list[EngineTask], states: dict[int, TaskState]) -> None:
        """File the default schedule of each task whose measured candidates all lost to it, so that compiling keeps
        the default (``model_run.default_record``; on a GPU nothing is filed)."""
        records, filed = [], []  # the records to write, and (state, default µs) of each in the same order
        for t in tasks:
            state = states[t.task.workload_id]
            if t.default_us is None or (state.best_us is not None and state.best_us <= t.default_us):
                continue
            record = default_record(self.model_run, t.task, t.default_us, self.team)
            if record is not None:
                records.append(record)
                filed.append((state, t.default_us))
        refused = refused_positions(records, self.writer.write(records)) if records else {}
        for k, (state, default_us) in enumerate(filed):
            if k not in refused:
                state.best_us = default_us

    def _point(self, tuning: _Tuning, task: str | None) -> dict:
        """One point of the run's history: where the tuning stands after a batch (of ``task``; None: the start)."""
        return {
            "seconds": round(tuning.elapsed(), 3),
            "trials": tuning.spent(),
            "task": task,
            "best_us": {s.name: s.best_us for s in tuning.states.values()},
            "model_us": tuning.planner.model_us(),
        }

    def _state(self, t: EngineTask) -> TaskState:
        wid, device_id = t.task.workload_id, self.tvm_database.device_id
        stored = self.storage.tuning_state(wid, device_id)
        best = self.storage.top_k(wid, device_id, 1)
        self._stored_traces[wid] = stored.traces
        return TaskState(
            t.task.name,
            t.task.weight,
            t.default_us,
            best_us=best[0].mean_s * 1e6 if best else None,
            stored=stored.tuned,
            workload_id=wid,
        )

    def _start(self, t: EngineTask, state: TaskState, planner: Planner) -> TaskSearch:
        """The task's search, begun, after its donor seeds are measured: the schedules given with the task, else the
        run's donors' for it."""
        search = TaskSearch(self.search_context, t.task, self._stored_traces[t.task.workload_id])
        seeds = t.seed_schedules or (self.donors.seeds(t.task) if self.donors is not None else [])
        # A 1x1 convolution's matrix-product schedules first: nearer MLAS's speed than its donors' or a search's
        # first batches reach in minutes (tvm_side/gemm_schedules.py).
        seeds = matrix_product_seeds(t.task.mod, self.target) + seeds
        if seeds:
            seeds = seeds[: self.opts.seeds]
            left = planner.trials_left()
            if left is not None:
                seeds = seeds[:left]
            state.candidates += len(seeds)
            search.measure(state, [search.candidate(s) for s in seeds])
        return search


def _faster(us: float | None, than: float | None) -> bool:
    """Whether a latency is known and beats another (any, where that is unknown)."""
    return us is not None and (than is None or us < than)
