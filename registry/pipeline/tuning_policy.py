"""How ``registry tune`` spends a budget across a model's tasks, and when it stops one (the Trimmer idea).

Plain Python, no TVM: the engine (``registry.pipeline.engine``) reports each batch here and asks which task to
tune next.

- **Split by weight x latency.** The next batch goes to the live task with the largest ``weight x best latency``
  per batch it has had in this run, so tasks receive batches in proportion to their share of the end-to-end latency
  (a water-filling), and a task that got fast stops drawing batches.
- **Stop on improvement per second.** After each batch the gain in end-to-end latency (``weight x`` the drop of the
  task's best latency, as a share of the model's estimated latency) is divided by the batch's wall time. A task
  whose rate stays below ``min_gain_per_min`` for ``patience`` batches in a row is stopped. Under a time budget it
  is stopped only until every task is: then the slow ones resume while time is left, for the time a user gave is
  better spent than returned unused (docs/BENCHMARKS.md, "Convergence against plain MetaSchedule's plateau", rule 4).
- **Pause on negligible share.** A task whose ``weight x latency`` is below ``min_share`` of the model's estimated
  latency is paused: no schedule of it can move the end-to-end number. Early on that estimate is mostly untuned
  tasks (naive loops, 10-50x slower than tuned), so a share grows as the others get tuned: a paused task draws
  batches again once its share is back above ``min_share``: a task stopped for good on an early share would keep
  one batch while the model around it gets many times faster (the same section, rule 2).
- **A floor per task** (``floor``, off by default). Every live task gets ``floor`` measured candidates (stored ones
  counted) before any task gets more, and the gain rule stops none below it: a benchmark that must say "at least 32
  measured trials on every task of at least 1% of the model" can say it of the run, not hope for it. The share rule
  still pauses the negligible tasks.
- **Global budget.** Measured candidates (``trials``, counting those stored by earlier runs, so that a re-run
  resumes) and this run's wall seconds (``seconds``; a batch is not started if it would likely overrun).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from registry.options import TUNE


@dataclass
class TrimOptions:
    """The planner's rules, as shares where ``registry.options.TuneOptions`` has percentages."""

    min_share: float = TUNE.min_share / 100  # of the model's estimated latency
    min_gain_per_min: float = TUNE.min_gain / 100  # share of the model's estimated latency gained per minute
    patience: int = 3  # batches in a row below min_gain_per_min before a task stops
    keep: float = TUNE.keep  # share of each batch that is measured; the predicted-worst rest is dropped unmeasured
    floor: int = TUNE.floor  # measured candidates every live task gets first, and below which the gain rule stops none


@dataclass
class EngineOptions:
    """The engine's settings: ``registry.options.TuneOptions`` as the engine takes them, and the search's own."""

    trials: int | None = None  # measured candidates across the model, counting those stored by earlier runs
    seconds: float | None = None  # wall time of this run's tuning (run()'s deadline replaces it)
    batch: int = TUNE.batch  # candidates proposed per batch
    population: int = 128  # EvolutionarySearch population (MetaSchedule's default is 512)
    genetic_iters: int = 2  # EvolutionarySearch generations per batch (default 4)
    # MetaSchedule's share of each batch picked from fresh design-space samples rather than evolved: it truncates
    # batch x eps_greedy, so at the batch of 16 this picks none (every candidate is evolved); fresh samples per batch
    # do not help depthwise searches (docs/BENCHMARKS.md, "Fresh samples in each batch").
    eps_greedy: float = 0.05
    trim: TrimOptions = field(default_factory=TrimOptions)
    use_predictor: bool = TUNE.predictor  # start from the device's stored predictor, if it has one
    seeds: int = 4  # donor schedules measured per task before its first batch
    seed: int = 1
    plateau_window: int = TUNE.plateau  # trials: a task whose last ones gained under 1% has plateaued
    retune: bool = TUNE.retune  # tune plateaued tasks too
    lease_s: float = TUNE.lease  # how long a task stays leased to this run after its last batch


@dataclass
class TaskState:
    """One task's tuning so far, as the policy sees it. Latencies in microseconds."""

    name: str
    weight: int
    default_us: float | None  # TVM's default schedule; None if it did not build
    best_us: float | None = None  # best stored record on this device
    stored: int = 0  # tuned records found in the registry before this run
    candidates: int = 0  # proposed in this run (measured, dropped by the predictor, or found stored): not trials
    measurements: int = 0  # candidates built and timed in this run
    batches: int = 0
    seconds: float = 0.0  # wall time spent on this task in this run
    longest_s: float = 0.0  # its longest batch in this run
    slow_batches: int = 0
    stopped: str | None = None  # why the task stopped drawing batches
    small: bool = False  # stopped for its share of the model, which may grow back
    slow: bool = False  # stopped for its gain per minute, which a time budget may still afford
    held_by: str | None = None  # another run tuning it now (registry.pipeline.effort): not this run's to tune
    others: int = 0  # candidates other runs measured on it since this run began
    workload_id: int | None = None  # the registry's id of its workload (None where no registry is involved)

    @property
    def measured(self) -> int:
        """Its measured candidates, earlier and concurrent runs' included."""
        return self.stored + self.measurements + self.others

    @property
    def latency_us(self) -> float | None:
        """What the model runs with now: the best record if it beats the default schedule."""
        known = [x for x in (self.best_us, self.default_us) if x is not None]
        return min(known) if known else None


@dataclass
class Budget:
    trials: int | None = None  # measured candidates across the model's tasks, earlier runs included
    seconds: float | None = None  # this run's tuning wall time (what the command's budget leaves for it)


@dataclass
class Planner:
    tasks: list[TaskState]
    budget: Budget
    trim: TrimOptions = field(default_factory=TrimOptions)
    batch_seconds: list[float] = field(default_factory=list)
    stop: str | None = None  # why the last next_task() gave no task, when the budget was why

    def model_us(self) -> float:
        """The model's estimated latency: the sum of weight x latency over its tasks."""
        return sum(t.weight * t.latency_us for t in self.tasks if t.latency_us is not None)

    def trials_left(self) -> int | None:
        if self.budget.trials is None:
            return None
        spent = sum(t.measured for t in self.tasks)
        return max(0, self.budget.trials - spent)

    def out_of_budget(self, elapsed_s: float, task: TaskState | None = None) -> str | None:
        """Why no batch (of ``task``, when given) may start now, or None. A batch is expected to take the median
        batch's time, or ``task``'s own longest where that is longer. A model's batches differ (a large stem
        convolution's take a few times its neighbours'), and one task's grow as its cost model trains on more records
        and as the machine's load varies; expected to take the task's mean, a last batch ends past the deadline
        (docs/BENCHMARKS.md, "Convergence against plain MetaSchedule's plateau", rule 5)."""
        left = self.trials_left()
        if left is not None and left <= 0:
            return f"trial budget of {self.budget.trials} spent"
        if self.budget.seconds is not None:
            expected = statistics.median(self.batch_seconds) if self.batch_seconds else 0.0
            if task is not None and task.batches:
                expected = max(expected, task.longest_s)
            if elapsed_s + expected > self.budget.seconds:
                return f"time budget spent ({self.budget.seconds:.0f} s of tuning)"
        return None

    def next_task(self, elapsed_s: float) -> TaskState | None:
        """The task that gets the next batch, or None when tuning is over (``stop`` then says why, if the budget
        ended it)."""
        self.stop = self.out_of_budget(elapsed_s)
        if self.stop is not None:  # before any resume: a run that ends keeps each task's reason for stopping
            return None
        live = [t for t in self.tasks if t.stopped is None and t.held_by is None] or self._resume_slow()
        if not live:
            return None
        live = [t for t in live if t.measured < self.trim.floor] or live
        task = max(live, key=lambda t: (t.weight * (t.latency_us or 0.0)) / (1 + t.batches))
        self.stop = self.out_of_budget(elapsed_s, task)
        return None if self.stop is not None else task

    def waiting(self) -> list[TaskState]:
        """The tasks left to tune that other runs hold: what this run waits for when it has nothing else to do."""
        return [t for t in self.tasks if t.stopped is None and t.held_by is not None]

    def _resume_slow(self) -> list[TaskState]:
        """With a time budget, the tasks stopped for their gain per minute, live again (each for ``patience`` more
        slow batches); without one, none."""
        if self.budget.seconds is None:
            return []
        resumed = [t for t in self.tasks if t.slow and t.held_by is None]
        for t in resumed:
            t.stopped, t.slow, t.slow_batches = None, False, 0
        return resumed

    def record_batch(self, task: TaskState, best_before_us: float | None, seconds: float) -> None:
        """Account one batch of ``task`` (its best_us already updated) and apply the stopping rules."""
        task.batches += 1
        task.seconds += seconds
        task.longest_s = max(task.longest_s, seconds)
        self.batch_seconds.append(seconds)
        total = self.model_us()
        if not total or task.latency_us is None:
            return
        # What the model ran with before the batch: a better candidate that is still slower than the default gains
        # the model nothing, and measured against the best candidate a task whose candidates all lose to its default
        # looks as if it kept improving (docs/BENCHMARKS.md, "Convergence against plain MetaSchedule's plateau", 3).
        before = min((x for x in (best_before_us, task.default_us) if x is not None), default=task.latency_us)
        gained = task.weight * (before - task.latency_us) / total
        rate = gained / (seconds / 60.0) if seconds > 0 else float("inf")
        task.slow_batches = task.slow_batches + 1 if rate < self.trim.min_gain_per_min else 0
        self.apply_share_rule()
        floor_met = task.measured >= self.trim.floor
        if task.stopped is None and floor_met and task.slow_batches >= self.trim.patience:
            task.stopped = (
                f"gain below {self.trim.min_gain_per_min:.1%} of the model per minute for {task.slow_batches} batches"
            )
            task.slow = True

    def apply_share_rule(self) -> None:
        """Pause every tuned-at-least-once task whose share of the model's latency is negligible, and resume the
        paused ones whose share has grown back (the others got faster)."""
        total = self.model_us()
        for t in self.tasks:
            if not (t.batches and t.latency_us is not None and total):
                continue
            share = t.weight * t.latency_us / total
            if t.stopped is None and share < self.trim.min_share:
                t.stopped, t.small = f"{share:.2%} of the model's latency, below {self.trim.min_share:.0%}", True
            elif t.small and share >= self.trim.min_share:
                t.stopped, t.small = None, False
