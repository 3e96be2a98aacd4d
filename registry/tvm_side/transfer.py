"""Transfer-tuning of one model: reuse the registry's schedules of similar operators, task by task.

For each task of the model, in order of preference:

1. **exact**: the same workload already has a record on this device; compilation will use it.
2. **transferred**: the nearest stored workloads of the same operator kind (FAISS over signature embeddings) donate
   their best traces; each is applied to the task (replayed, or through its anchor block for a fused variant), the
   candidates are built and timed here, and the fastest is committed as a ``transferred`` record naming its donor,
   but only if it beats the task's default schedule.
3. **default**: no donor helped. The task keeps TVM's default schedule until it is tuned (``registry tune``).

The model is then compiled with the registry as its MetaSchedule database, and its end-to-end latency measured
against the untuned build.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tvm.target import Target

from registry import hostinfo
from registry.report import ModelReport, TaskResult
from registry.similarity.donors import Donor, find_donors
from registry.similarity.embedding import embed
from registry.similarity.index import SimilarityIndex
from registry.store import queries
from registry.store.rows import RecordIn
from registry.store.store import Store
from registry.tvm_side import apply_trace, kernel
from registry.tvm_side.donor_schedules import DonorSchedules
from registry.tvm_side.frontend import LoadedModel
from registry.tvm_side.pipeline import Progress, Task, begin, finish, registry_database
from registry.tvm_side.signature import structural_hash
from registry.tvm_side.tuning.engine import EngineTask, TuneOptions


@dataclass
class TransferOptions:
    budget: int = 3  # candidate schedules measured per task, at most (see docs/BENCHMARKS.md: 3 vs 8)
    neighbours: int = 5  # donor workloads considered per task
    per_device: int = 2  # records taken from each donor workload on each device
    team: str | None = None
    output: Path | None = None  # where to export the compiled library
    # Fallback tuning of the tasks no donor helped: this many measured trials per such task (0: none).
    tune_trials: int = 32
    tune: TuneOptions = field(default_factory=TuneOptions)


def transfer(
    store: Store,
    loaded: LoadedModel,
    target: Target,
    threads: int,
    options: TransferOptions | None = None,
    progress: Progress = lambda _done, _total, _what: None,
    import_s: float = 0.0,
) -> ModelReport:
    """Transfer-tune ``loaded`` for ``target`` at ``threads`` runtime threads; see the module docstring."""
    opts = options or TransferOptions()
    clock, tasks, db = begin(store, loaded, target, threads, "transfer", "transferred", opts.team, import_s)
    with clock("donors"):
        index = SimilarityIndex(store)
        index.load()  # rebuilt here if stale, so that the first task does not pay for it
    resolver = _Resolver(store, db, index, target, opts, clock, loaded.name)
    results = []
    for i, task in enumerate(tasks):
        progress(i, len(tasks), task.name)
        results.append(resolver.resolve(task))
    tuning = None
    fallback = [(task, r) for task, r in zip(tasks, results, strict=True) if r.source == "default"]
    if fallback and opts.tune_trials > 0:
        progress(len(tasks), len(tasks), f"tuning {len(fallback)} task(s) without a usable donor")
        tuning = _tune_fallback(store, target, threads, opts, clock, loaded.name, resolver, fallback)
    progress(len(tasks), len(tasks), "compiling")
    report = finish(loaded, db, target, threads, results, clock, opts.output)
    report.tuning = tuning
    return report


def _tune_fallback(store, target, threads, opts, clock, model, resolver, fallback) -> dict:
    """The engine of ``registry tune`` on the tasks transfer left on the default schedule, seeded with the donor
    schedules transfer tried for them; each result is updated in place."""
    from dataclasses import replace

    from registry.tvm_side.tune import run_engine, task_result, tuning_summary

    tasks = [task for task, _ in fallback]
    db = registry_database(store, target, threads, tasks, "tuned", opts.team, model)
    engine_opts = replace(opts.tune, trials=opts.tune_trials * len(fallback))
    engine_tasks = [EngineTask(task, r.before_us, resolver.tried.get(task.workload_id, [])) for task, r in fallback]
    quiet = lambda *_: None  # noqa: E731 -- transfer's own progress line already names this step
    outcome = run_engine(store, db, target, threads, engine_opts, clock, model, opts.team, quiet, engine_tasks)
    for t, (_, result) in zip(engine_tasks, fallback, strict=True):
        tuned = task_result(t, outcome)
        result.source, result.after_us = tuned.source, tuned.after_us
        result.trials, result.measurements, result.tune_s, result.stopped = (
            tuned.trials,
            tuned.measurements,
            tuned.tune_s,
            tuned.stopped,
        )
    return tuning_summary(outcome)


class _Resolver:
    """Resolves one task at a time: exact hit, else the best donor candidate that beats the default, else default."""

    def __init__(self, store, db, index, target, opts, clock, model) -> None:
        self.store, self.db, self.index, self.target = store, db, index, target
        self.opts, self.clock, self.model = opts, clock, model
        self.schedules = DonorSchedules(store, target)
        self.tried: dict[int, list] = {}  # workload id -> donor schedules measured: seeds for fallback tuning

    def resolve(self, task: Task) -> TaskResult:
        with self.clock("report"):
            default = kernel.build_and_measure(task.mod, self.target)
        before = kernel.median_us(default)
        result = TaskResult(task.name, task.weight, task.workload_id, "default", before, before, candidates=0)
        with self.clock("donors"):
            best = self._best_here(task.workload_id)
        if best is not None:
            with self.clock("report"):  # timed here like the default, so that before -> after is one comparison
                stored = apply_trace.as_stored(task.mod, json.loads(best.trace_json))
                timing = kernel.build_and_measure(stored.mod, self.target) if stored is not None else None
            result.source = "exact"
            result.after_us = timing.median_us if timing is not None else best.mean_s * 1e6
            return result
        vector = embed(task.signature)
        with self.clock("donors"):
            donors = find_donors(
                self.index,
                vector,
                self.db.device_id,
                self.target.kind.name,
                k=self.opts.neighbours,
                per_device=self.opts.per_device,
                exclude=frozenset({task.workload_id}),
            )
        winner = self._best_candidate(task, donors, result)
        if winner is None:
            return result
        donor, sch, timing = winner
        if default is not None and timing.median_us >= default.median_us:
            return result  # the default schedule is at least as fast: keep it, commit nothing
        self._commit(task, donor, sch, timing)
        self.index.add(task.workload_id, vector)  # a donor for the model's later tasks
        result.source, result.after_us = "transferred", timing.median_us
        result.donor = f"{donor.task_name}#{donor.workload_id}"
        result.donor_record_id, result.distance, result.same_device = donor.record.id, donor.distance, donor.same_device
        return result

    def _best_here(self, workload_id: int) -> queries.StoredRecord | None:
        with self.store.read() as conn:
            best = queries.top_k(conn, workload_id, self.db.device_id, 1)
        return best[0] if best else None

    def _best_candidate(self, task: Task, donors: list[Donor], result: TaskResult):
        best = None
        seen: set[str] = set()
        candidates = self.schedules.candidates(task.mod, donors, self.opts.budget)
        attempts = 0
        while result.candidates < self.opts.budget and attempts < 4 * self.opts.budget:
            attempts += 1
            with self.clock("donors"):
                nxt = next(candidates, None)
            if nxt is None:
                break
            donor, sch = nxt
            key = structural_hash(sch.mod)
            if key in seen:  # two donors, or a donor and a re-sample, gave the same program
                continue
            seen.add(key)
            with self.clock("measure"):
                timing = kernel.build_and_measure(sch.mod, self.target)
            result.candidates += 1
            if timing is not None:
                self.tried.setdefault(task.workload_id, []).append(sch)
            if timing is not None and (best is None or timing.median_us < best[2].median_us):
                best = (donor, sch, timing)
        return best

    def _commit(self, task: Task, donor: Donor, sch, timing: kernel.Timing) -> None:
        record = RecordIn(
            workload=task.ident,
            device=self.db.device,
            trace=apply_trace.trace_json(sch),
            run_secs=timing.run_secs,
            source="transferred",
            tool_version=hostinfo.tool_version(),
            donor_record_id=donor.record.id,
            team=self.opts.team,
            model=self.model,
            host=hostinfo.hostname(),
        )
        self.store.ingest([], [record])
