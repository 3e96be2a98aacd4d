"""What `registry transfer` (and later `registry tune`) reports about one model: plain data, a table, and JSON.

No TVM here, so that tools can read a saved report without loading the compiler.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

TASK_OUTCOMES = ("exact", "transferred", "predicted", "tuned", "default", "failed")


@dataclass
class TaskResult:
    name: str
    weight: int
    workload_id: int
    source: str  # one of TASK_OUTCOMES; "failed": neither the default schedule nor any candidate ran
    before_us: float | None  # the default schedule; None if it could not be built or run
    after_us: float | None  # what the model now runs with
    donor: str | None = None  # "task_name#workload_id" of the donor workload
    donor_record_id: int | None = None
    distance: float | None = None
    candidates: int = 0  # candidate schedules measured for this task (with --no-measure: ranked)
    same_device: bool | None = None  # whether the donor record was measured on this device
    # The FLOP rate the transferred schedule reached here as a share of the best its donors' own records reached
    # (``similarity.donors.best_rate``): well under 1, the schedule did not carry over, and transfer's fallback tuning
    # takes the task on.
    of_donor_rate: float | None = None
    # Tuning cost (registry tune, or transfer's fallback tuning); zero for tasks that were not tuned. Trials are
    # counted the same way everywhere (tables, JSON, --trials, progress): measured candidates.
    trials: int = 0  # candidates this run's tuning built and timed
    measurements: int = 0  # the same as trials (kept for readers of older reports)
    proposed: int = 0  # candidates the search proposed: measured, dropped unmeasured by the predictor, or stored
    tune_s: float = 0.0  # wall seconds spent tuning this task
    stopped: str | None = None  # why tuning of this task stopped, or why transfer did not tune it
    error: str | None = None  # why the default schedule could not be built or run, in one line
    # every tuning run's effort on this task and device, as recorded (registry.pipeline.effort); None: none recorded
    effort_trials: int | None = None
    effort_s: float | None = None
    plateau: bool | None = None


@dataclass
class Timings:
    """Disjoint wall-time parts, seconds."""

    import_s: float = 0.0  # ONNX -> Relax, task extraction, recording the model
    donors_s: float = 0.0  # donor search and trace application
    search_s: float = 0.0  # the tuner's search: design spaces, evolution, cost model
    measure_s: float = 0.0  # building and timing the candidate schedules
    report_s: float = 0.0  # timing the default schedules and the end-to-end model, for this report
    compile_s: float = 0.0  # compiling the model, untuned and final, and exporting it

    @property
    def finding_s(self) -> float:
        """Everything spent finding schedules: what a tuner would spend (search plus candidate measurement)."""
        return self.donors_s + self.search_s + self.measure_s

    @property
    def total_s(self) -> float:
        return self.import_s + self.finding_s + self.report_s + self.compile_s


@dataclass
class ModelReport:
    model: str
    device: str
    threads: int
    untuned_ms: float | None  # None when the model could not be run (see errors)
    final_ms: float | None
    tasks: list[TaskResult]
    timings: Timings = field(default_factory=Timings)
    output: str | None = None
    tuning: dict[str, Any] | None = None  # how the tuner ran: measurer, degree of parallelism, predictor, stop
    errors: list[str] = field(default_factory=list)  # why a model latency is missing, one line each
    # The predictor that ranked a transfer's donor schedules: version, sibling device (or None), its held-out top-1
    # score, and how many candidates a task it warranted measuring; None: no predictor ranked them
    ranked_by: dict[str, Any] | None = None
    # The tuner's per-batch history: {seconds, trials, task, best_us: {task: µs or None}, model_us}; None: no tuning
    history: list[dict[str, Any]] | None = None
    device_id: int | None = None  # the registry's device row the records were filed under (not in the JSON)
    sha256: str | None = None  # the model file's, as the registry records the model (not in the JSON)

    @property
    def speedup(self) -> float | None:
        return self.untuned_ms / self.final_ms if self.untuned_ms and self.final_ms else None

    def as_json(self) -> dict[str, Any]:
        t = self.timings
        return {
            "model": self.model,
            "device": self.device,
            "threads": self.threads,
            "untuned_ms": self.untuned_ms,
            "final_ms": self.final_ms,
            "speedup": self.speedup,
            "search_s": t.finding_s,
            "timings": {**asdict(t), "total_s": t.total_s},
            "sources": {s: sum(1 for task in self.tasks if task.source == s) for s in TASK_OUTCOMES},
            "output": self.output,
            "tuning": self.tuning,
            "tasks": [asdict(task) for task in self.tasks],
            "errors": self.errors,
            "ranked_by": self.ranked_by,
            "history": self.history,
        }


def _us(value: float | None) -> str:
    return "failed" if value is None else f"{value:,.1f}"


def task_table(report: ModelReport) -> tuple[list[str], list[list[str]]]:
    headers = ["task", "weight", "source", "donor", "distance", "before µs", "after µs", "speedup"]
    rows = []
    for t in report.tasks:
        gain = f"{t.before_us / t.after_us:.1f}x" if t.before_us and t.after_us else "-"
        donor = "-" if t.donor is None else t.donor + ("" if t.same_device else " (other device)")
        if t.of_donor_rate is not None:
            donor += f" at {t.of_donor_rate:.0%} of the donors' rate"
        dist = "-" if t.distance is None else f"{t.distance:.1f}"
        rows.append([t.name, str(t.weight), t.source, donor, dist, _us(t.before_us), _us(t.after_us), gain])
    if any(t.trials or t.proposed for t in report.tasks):  # what tuning each task cost
        headers += ["trials", "proposed", "tune s"]
        for row, t in zip(rows, report.tasks, strict=True):
            row += [str(t.trials), str(t.proposed), f"{t.tune_s:.1f}"]
    if any(t.effort_trials is not None for t in report.tasks):  # what every run's tuning cost, as recorded
        headers.append("searched")
        for row, t in zip(rows, report.tasks, strict=True):
            searched = "-" if t.effort_trials is None else f"{t.effort_trials}" + (", plateau" if t.plateau else "")
            row.append(searched)
    return headers, rows


def summary_lines(report: ModelReport) -> list[str]:
    t = report.timings
    counts = ", ".join(f"{n} {s}" for s in TASK_OUTCOMES if (n := sum(1 for x in report.tasks if x.source == s)))
    lines = [
        f"model {report.model} on {report.device} ({report.threads} thread(s)): {len(report.tasks)} tasks ({counts})",
        _latency_line(report),
        f"wall time {t.total_s:.1f} s: import {t.import_s:.1f} s, donor search {t.donors_s:.1f} s, "
        f"tuning search {t.search_s:.1f} s, measure {t.measure_s:.1f} s, report {t.report_s:.1f} s, "
        f"compile {t.compile_s:.1f} s",
    ]
    tuned = [x for x in report.tasks if x.trials or x.proposed]
    if tuned:
        budget = (report.tuning or {}).get("trials")
        asked = ""
        if budget:
            earlier = budget.get("stored", 0)
            asked = f" of the {budget['asked']} asked" + (f" ({earlier} stored by earlier runs)" if earlier else "")
        lines.append(
            f"tuning cost: {sum(x.tune_s for x in tuned):.1f} s, {sum(x.trials for x in tuned)} trials"
            f"{asked} (measured candidates; {sum(x.proposed for x in tuned)} proposed) over {len(tuned)} task(s)"
        )
    if report.ranked_by:
        r = report.ranked_by
        whose = f" of sibling device {r['sibling']}" if r.get("sibling") else ""
        whose += f", trained on {r['trained_on']}" if r.get("trained_on") else ""
        top1 = f"held-out top-1 {r['top1']:.2f}" if isinstance(r.get("top1"), float) else "never judged"
        unseen = [f"{name} {t:.2f}" for name, t in (r.get("unseen_top1") or {}).items() if isinstance(t, float)]
        top1 += f"; on devices it never trained on: {', '.join(unseen)}" if unseen else ""
        lines.append(
            f"donor schedules ranked by predictor v{r['version']}{whose} ({top1}): "
            f"up to {r['measured']} measured a task"
        )
    if report.tuning:
        lines.append(report.tuning.get("summary", ""))
    for error in report.errors:
        lines.append(f"not measured: {error}")
    for task in report.tasks:
        if task.error:
            lines.append(f"task {task.name}: {task.error}")
    if report.output:
        lines.append(f"compiled library written to {report.output}")
    return lines


def _latency_line(report: ModelReport) -> str:
    def ms(value: float | None) -> str:
        return "not measured" if value is None else f"{value:.3f} ms"

    gain = f" ({report.speedup:.1f}x faster)" if report.speedup is not None else ""
    return f"end-to-end latency: untuned {ms(report.untuned_ms)} -> final {ms(report.final_ms)}{gain}"
