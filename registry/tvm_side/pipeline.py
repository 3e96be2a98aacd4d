"""The steps every per-model command shares (``registry transfer``, ``registry tune``): extracting a model's tasks,
checking that it can be measured here, timing wall-clock parts, compiling the result and reporting it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tvm import relax
from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from registry.errors import BadInputError, RegistryError
from registry.report import ModelReport, TaskResult, Timings
from registry.store import queries
from registry.store.rows import Signature
from registry.store.store import Store
from registry.tvm_side.compat import TVM_ERRORS, error_line
from registry.tvm_side.database import RegistryDatabase
from registry.tvm_side.frontend import LoadedModel
from registry.tvm_side.measure import model_latency_ms
from registry.tvm_side.signature import workload_in
from registry.tvm_side.target import THREADS_ENV, running_threads

# Progress: (steps done, steps in all, what is happening now).
Progress = Callable[[int, int, str], None]


@dataclass
class Task:
    name: str
    weight: int
    mod: IRModule
    ident: tuple[str, str]  # (structural hash, module equality), as the store keys workloads
    workload_id: int
    signature: Signature


class Clock:
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


def check_runs_here(target: Target, threads: int, what: str) -> None:
    """Candidates and models are timed in this process, so the target must be this CPU, at the thread count the
    records will be filed under."""
    from tvm.target import codegen

    host_triple = codegen.llvm_get_system_triple()
    triple = str(target.attrs.get("mtriple", host_triple))
    if target.kind.name != "llvm" or triple != host_triple:
        raise BadInputError(
            f"{what} measures on this machine, so the target must be its CPU (llvm, mtriple {host_triple}); "
            f"got {target.kind.name}" + (f" for {triple}" if target.kind.name == "llvm" else "")
        )
    running = running_threads()
    if running != threads:
        raise RegistryError(
            f"TVM's runtime in this process runs {running} thread(s), not {threads}: it reads {THREADS_ENV} once, "
            f"when it starts, so set {THREADS_ENV}={threads} before the first use of TVM (the CLI's --threads does)"
        )


def extract(store: Store, loaded: LoadedModel, target: Target) -> list[Task]:
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
        Task(t.task_name, int(t.weight), t.dispatched[0], w.ident, ids[w.ident], w.signature)
        for w, t in zip(workloads, extracted, strict=True)
    ]


def begin(store: Store, loaded: LoadedModel, target: Target, threads: int, command: str, source: str, team, import_s):
    """What every per-model command does first: check the target, start the clock, extract and record the tasks,
    and open the registry database records are filed in. Returns (clock, tasks, database)."""
    check_runs_here(target, threads, command)
    clock = Clock(Timings(import_s=import_s))
    with clock("import"):
        tasks = extract(store, loaded, target)
        db = registry_database(store, target, threads, tasks, source, team, loaded.name)
    return clock, tasks, db


def registry_database(store: Store, target: Target, threads: int, tasks: list[Task], source: str, team, model):
    return RegistryDatabase(
        target,
        store,
        num_threads=threads,
        source=source,
        team=team,
        model=model,
        task_names={t.ident[0]: t.name for t in tasks},
    )


def finish(
    loaded: LoadedModel,
    db: RegistryDatabase,
    target: Target,
    threads: int,
    results: list[TaskResult],
    clock: Clock,
    output: Path | None,
) -> ModelReport:
    """Compile the model untuned and with the registry, time both end to end, and export the tuned one."""
    try:
        with clock("compile"):
            untuned_exe = ms.relax_integration.compile_relax(ms.database.MemoryDatabase(), loaded.mod, target, None)
            final_exe = ms.relax_integration.compile_relax(db, loaded.mod, target, None)
            if output is not None:
                _export(final_exe, output)
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
        timings=clock.timings,
        output=str(output) if output is not None else None,
    )


def _export(executable, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        executable.export_library(str(path))
    except OSError as e:
        raise BadInputError(f"cannot write {path}: {e.strerror}") from None
