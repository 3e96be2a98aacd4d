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

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from registry import hostinfo
from registry.errors import BadInputError, RegistryError
from registry.report import ModelReport, TaskResult, Timings
from registry.similarity.donors import Donor, find_donors
from registry.similarity.embedding import embed
from registry.similarity.index import SimilarityIndex
from registry.store import queries
from registry.store.rows import RecordIn, Signature
from registry.store.store import Store
from registry.tvm_side import apply_trace, kernel
from registry.tvm_side.compat import TVM_ERRORS, error_line
from registry.tvm_side.database import RegistryDatabase
from registry.tvm_side.frontend import LoadedModel
from registry.tvm_side.measure import model_latency_ms
from registry.tvm_side.signature import structural_hash, workload_in
from registry.tvm_side.target import THREADS_ENV, running_threads

# Progress: (tasks done, tasks in all, what is happening now).
Progress = Callable[[int, int, str], None]


@dataclass
class TransferOptions:
    budget: int = 3  # candidate schedules measured per task, at most (see docs/BENCHMARKS.md: 3 vs 8)
    neighbours: int = 5  # donor workloads considered per task
    per_device: int = 2  # records taken from each donor workload on each device
    team: str | None = None
    output: Path | None = None  # where to export the compiled library


@dataclass
class _Task:
    name: str
    weight: int
    mod: IRModule
    ident: tuple[str, str]  # (structural hash, module equality), as the store keys workloads
    workload_id: int
    signature: Signature


class _Clock:
    """Adds wall time to one of the report's parts: ``with clock("donors"): ...``."""

    def __init__(self, timings: Timings) -> None:
        self.timings = timings

    @contextlib.contextmanager
    def __call__(self, part: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            attr = f"{part}_s"
            setattr(self.timings, attr, getattr(self.timings, attr) + time.perf_counter() - start)


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
    _check_runs_here(target, threads)
    timings = Timings(import_s=import_s)
    clock = _Clock(timings)
    with clock("import"):
        tasks = _extract(store, loaded, target)
        db = RegistryDatabase(
            target,
            store,
            num_threads=threads,
            source="transferred",
            team=opts.team,
            model=loaded.name,
            task_names={t.ident[0]: t.name for t in tasks},
        )
    with clock("donors"):
        index = SimilarityIndex(store)
        index.load()  # rebuilt here if stale, so that the first task does not pay for it
    resolver = _Resolver(store, db, index, target, opts, clock, loaded.name)
    results = []
    for i, task in enumerate(tasks):
        progress(i, len(tasks), task.name)
        results.append(resolver.resolve(task))
    progress(len(tasks), len(tasks), "compiling")

    try:
        with clock("compile"):
            untuned_exe = ms.relax_integration.compile_relax(ms.database.MemoryDatabase(), loaded.mod, target, None)
            final_exe = ms.relax_integration.compile_relax(db, loaded.mod, target, None)
            if opts.output is not None:
                _export(final_exe, opts.output)
        with clock("report"):
            untuned_ms = model_latency_ms(untuned_exe, loaded)
            final_ms = model_latency_ms(final_exe, loaded)
    except TVM_ERRORS as e:  # the schedules found so far stay committed: each is a complete, measured record
        raise RegistryError(f"{loaded.name}: compiling or running the model failed: {error_line(e)}") from None
    return ModelReport(
        model=loaded.name,
        device=db.device.name,
        threads=threads,
        untuned_ms=untuned_ms,
        final_ms=final_ms,
        tasks=results,
        timings=timings,
        output=str(opts.output) if opts.output is not None else None,
    )


def _check_runs_here(target: Target, threads: int) -> None:
    """Candidates and models are timed in this process, so the target must be this CPU, at the thread count the
    records will be filed under."""
    from tvm.target import codegen

    host_triple = codegen.llvm_get_system_triple()
    triple = str(target.attrs.get("mtriple", host_triple))
    if target.kind.name != "llvm" or triple != host_triple:
        raise BadInputError(
            f"transfer measures on this machine, so the target must be its CPU (llvm, mtriple {host_triple}); "
            f"got {target.kind.name}" + (f" for {triple}" if target.kind.name == "llvm" else "")
        )
    running = running_threads()
    if running != threads:
        raise RegistryError(
            f"TVM's runtime in this process runs {running} thread(s), not {threads}: it reads {THREADS_ENV} once, "
            f"when it starts, so set {THREADS_ENV}={threads} before the first use of TVM (the CLI's --threads does)"
        )


def _extract(store: Store, loaded: LoadedModel, target: Target) -> list[_Task]:
    """The model's tuning tasks, recorded in the store with their weights."""
    zero = relax.get_pipeline("zero")(loaded.mod)  # extract_tasks finds nothing in the raw module
    extracted = ms.relax_integration.extract_tasks(zero, target)
    workloads = [workload_in(t.dispatched[0], task_name=t.task_name) for t in extracted]
    store.record_model(
        loaded.name,
        loaded.sha256,
        loaded.input_shapes,
        [(w, t.task_name, int(t.weight)) for w, t in zip(workloads, extracted, strict=True)],
    )
    with store.read() as conn:
        ids = {w.ident: queries.workload_id(conn, *w.ident) for w in workloads}
    return [
        _Task(t.task_name, int(t.weight), t.dispatched[0], w.ident, ids[w.ident], w.signature)
        for w, t in zip(workloads, extracted, strict=True)
    ]


def _export(executable, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        executable.export_library(str(path))
    except OSError as e:
        raise BadInputError(f"cannot write {path}: {e.strerror}") from None


class _Resolver:
    """Resolves one task at a time: exact hit, else the best donor candidate that beats the default, else default."""

    def __init__(self, store, db, index, target, opts, clock, model) -> None:
        self.store, self.db, self.index, self.target = store, db, index, target
        self.opts, self.clock, self.model = opts, clock, model
        self._donor_mods: dict[int, IRModule] = {}

    def resolve(self, task: _Task) -> TaskResult:
        with self.clock("report"):
            default = kernel.build_and_measure(task.mod, self.target)
        result = TaskResult(
            task.name, task.weight, task.workload_id, "default", _us(default), _us(default), candidates=0
        )
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

    def _candidates(self, task: _Task, donors: list[Donor]):
        """(donor, schedule) pairs: every donor record as it is, then its decisions re-sampled, until the budget."""
        for donor in donors:
            trace = _trace(donor)
            sch = apply_trace.replay(task.mod, self.target, trace)
            if sch is None:
                sch = apply_trace.via_anchor(task.mod, self.target, self._donor_mod(donor.workload_id), trace)
            if sch is not None:
                yield donor, sch
        for seed in range(1, self.opts.budget + 1):
            for donor in donors[:2]:
                sch = apply_trace.replay(task.mod, self.target, _trace(donor), resample=True, seed=seed)
                if sch is not None:
                    yield donor, sch

    def _best_candidate(self, task: _Task, donors: list[Donor], result: TaskResult):
        best = None
        seen: set[str] = set()
        candidates = self._candidates(task, donors)
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
            if timing is not None and (best is None or timing.median_us < best[2].median_us):
                best = (donor, sch, timing)
        return best

    def _donor_mod(self, workload_id: int) -> IRModule:
        if workload_id not in self._donor_mods:
            with self.store.read() as conn:
                stored = queries.workloads_by_id(conn, [workload_id])[workload_id]
            self._donor_mods[workload_id] = tvm.ir.load_json(stored.mod_json)
        return self._donor_mods[workload_id]

    def _commit(self, task: _Task, donor: Donor, sch, timing: kernel.Timing) -> None:
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


def _trace(donor: Donor) -> list:
    return json.loads(donor.record.trace_json)


def _us(timing: kernel.Timing | None) -> float | None:
    return None if timing is None else timing.median_us
