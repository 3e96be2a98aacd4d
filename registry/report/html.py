"""``registry report``: one self-contained HTML page about a model stored in the registry.

The page has the per-task table (source, donor and distance, before -> after, share of the model's latency) and
best-latency-over-time curves, per task and for the model, drawn from the records' timestamps as inline SVG
(``registry.report.svg``). With the report of the run that just ended (``--report`` on transfer and tune), the table
shows that run's before/after (each task's default schedule, timed by the run), and its per-batch history is drawn
too. No TVM, no script, no external asset: the file opens anywhere, from disk.

Everything taken from the database is escaped: a shared registry is written by others.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from urllib.parse import quote

import numpy as np

from registry.errors import BadInputError
from registry.report.model_report import ModelReport
from registry.report.svg import PALETTE, Series, step_chart
from registry.store.interface import RecordHistory, RecordPoint, ReportReads
from registry.store.rows import utc
from registry.store.values import Effort


@dataclass
class TaskLine:
    name: str
    workload_id: int
    weight: int
    source: str
    donor: str | None
    distance: float | None
    before_us: float | None
    after_us: float | None
    records: int
    curve: list[tuple[float, float]]  # (seconds since the first record, best latency so far in µs)
    share: float | None = None  # of the model's estimated latency, 0..1
    effort: Effort | None = None  # how hard tuning runs searched it on this device (None: no run recorded it)
    workload: str | None = None  # its structural hash, for a link to its page (the web view)


@dataclass
class ReportData:
    model: str
    model_id: int
    sha256: str
    input_shapes: str
    device: str | None
    generated_at: dt.datetime
    start: dt.datetime | None  # time of the first record drawn
    span_s: float
    tasks: list[TaskLine]
    model_curve: list[tuple[float, float]]  # (seconds, Σ weight x latency in µs)
    before_kind: str  # what "before" is: "default schedule" (a run's report) or BEFORE_STORED
    untuned_ms: float | None = None
    final_ms: float | None = None
    history: list[dict] | None = None
    notes: list[str] = field(default_factory=list)


def _distance(a: bytes, b: bytes) -> float | None:
    va, vb = np.frombuffer(a, dtype=np.float32), np.frombuffer(b, dtype=np.float32)
    if va.shape != vb.shape or not va.size:
        return None
    return float(((va.astype(np.float64) - vb) ** 2).sum())  # squared L2, as transfer reports it


def collect(
    store: ReportReads,
    model: str,
    device: str | None = None,
    run: ModelReport | None = None,
    sha256: str | None = None,
) -> ReportData:
    """The report's content: ``model`` is a model name (or id); ``device`` a selector as `registry lookup` takes
    (default: the device with the most records of the model's tasks); ``run`` the report of the run that just ended."""
    notes: list[str] = []
    models = store.find_models(model, sha256)
    if not models:
        known = ", ".join(store.model_names()) or "none yet"
        raise BadInputError(f"no model {model!r} in the registry (known: {known})")
    row = models[0]
    if len(models) > 1:
        notes.append(
            f"{len(models)} models match {model!r}; this is the newest (id {row.id}); give another's id to see it"
        )
    tasks = store.model_tasks(row.id)
    wids = [t.workload_id for t in tasks]
    if run is not None and run.device_id is not None:
        dev: tuple[int, str] | None = (run.device_id, run.device)
    elif device is not None:
        found = store.resolve_one_device(device)
        dev = (found.id, found.name)
    else:
        dev = store.busiest_device(wids)
    history = store.record_history(wids, dev[0]) if dev else RecordHistory([], {}, None)
    defaults = store.default_latencies(wids, dev[0]) if dev and run is None else {}
    hashes = store.workload_hashes(wids)
    efforts = store.efforts(wids, dev[0]) if dev else {}
    records = history.points
    by_wid: dict[int, list[RecordPoint]] = {}
    for r in records:
        by_wid.setdefault(r.workload_id, []).append(r)
    bests = {w: rs[-1] for w, rs in by_wid.items()}  # a workload's last improvement is its best record
    donor_rows = store.donor_rows([b.donor_record_id for b in bests.values() if b.donor_record_id is not None])
    # the points come in the order they were written, the first record of them all among them
    start = utc(records[0].created_at) if records else None
    end = utc(history.last_at) if history.last_at else None
    span = (end - start).total_seconds() if start and end else 0.0
    ran = {t.workload_id: t for t in run.tasks} if run is not None else {}
    embeddings = {t.workload_id: t.embedding for t in tasks}
    lines = []
    for t in tasks:
        recs = by_wid.get(t.workload_id, [])
        curve: list[tuple[float, float]] = []
        for r in recs:
            us = r.mean_s * 1e6
            if not curve or us < curve[-1][1]:
                curve.append(((utc(r.created_at) - start).total_seconds(), us))
        best = bests.get(t.workload_id)
        donor = distance = None
        if best is not None and best.donor_record_id in donor_rows:
            d = donor_rows[best.donor_record_id]
            donor = f"{d.task_name}#{d.workload_id}" + ("" if d.device_id == dev[0] else " (other device)")
            distance = _distance(embeddings[t.workload_id], d.embedding)
        line = TaskLine(
            t.task_name,
            t.workload_id,
            t.weight,
            best.source if best else "no record",
            donor,
            distance,
            _before(defaults.get(t.workload_id), recs),
            best.mean_s * 1e6 if best else None,
            history.counts.get(t.workload_id, 0),
            curve,
            effort=efforts.get(t.workload_id),
            workload=hashes.get(t.workload_id),
        )
        result = ran.get(t.workload_id)
        if result is not None:  # the run knows more: the default schedule's time and where "after" came from
            line.source, line.before_us, line.after_us = result.source, result.before_us, result.after_us
            if result.donor is not None:
                line.donor = result.donor + ("" if result.same_device else " (other device)")
                line.distance = result.distance
        lines.append(line)
    total = sum(t.weight * t.after_us for t in lines if t.after_us is not None)
    for t in lines:
        t.share = t.weight * t.after_us / total if total and t.after_us is not None else None
    if dev is None:
        notes.append("no device has an ok record of this model's tasks: nothing to draw")
    elif not records:
        notes.append(f"device {dev[1]} has no ok record of this model's tasks: nothing to draw")
    return ReportData(
        model=row.name,
        model_id=row.id,
        sha256=row.sha256,
        input_shapes=row.input_shapes_json,
        device=dev[1] if dev else None,
        generated_at=dt.datetime.now(dt.timezone.utc),
        start=start,
        span_s=span,
        tasks=lines,
        model_curve=_model_curve(lines),
        before_kind="default schedule" if run is not None else BEFORE_STORED,
        untuned_ms=run.untuned_ms if run else None,
        final_ms=run.final_ms if run else None,
        history=run.history if run else None,
        notes=notes,
    )


BEFORE_STORED = "TVM default where stored, else first record"


def _before(default_us: float | None, recs: list[RecordPoint]) -> float | None:
    """A task's "before" from the store alone: its default schedule's time where a record of it is stored, else its
    first record's, unless that record is its best (a transfer's one record): then it is unknown, not "1.0x"."""
    if default_us is not None:
        return default_us
    return recs[0].mean_s * 1e6 if len(recs) > 1 else None


def _model_curve(lines: list[TaskLine]) -> list[tuple[float, float]]:
    """Σ weight x latency over the tasks, at each improvement of any: a task counts with its "before" until its first
    record (its first record when "before" is unknown); tasks with neither are left out."""
    current = {t.workload_id: t.before_us if t.before_us is not None else t.curve[0][1] for t in lines if t.curve}
    for t in lines:
        if not t.curve and t.after_us is not None:
            current[t.workload_id] = t.after_us  # never recorded here: constant
    weights = {t.workload_id: t.weight for t in lines}
    events = sorted((x, i, t.workload_id, us) for i, t in enumerate(lines) for x, us in t.curve)
    if not events:
        return []
    value = sum(weights[w] * v for w, v in current.items())
    curve = [(0.0, value)]
    for x, _, wid, us in events:  # the sum moves by one task's change at a time: O(events), not O(events x tasks)
        if us < current[wid]:
            value += weights[wid] * (us - current[wid])
            current[wid] = us
            if value < curve[-1][1]:
                curve.append((x, value))
    return curve


# -- HTML ------------------------------------------------------------------------------------------------------------

# The report's own rules (the web view adds its layout around them: registry/server/templates/base.html). A table too
# wide for its window scrolls inside .wide instead of widening the page; long names wrap.
CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.meta{color:#555} .notes li{color:#8a5a00}
.wide{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin-top:8px} th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left}
td.name{overflow-wrap:anywhere;min-width:7em;max-width:28em}
th{background:#f3f3f3} td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.grid{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fff;border:1px solid #ddd}
svg.chart text{font:11px sans-serif;fill:#333} svg.chart text.title{font:bold 12px sans-serif}
svg.chart rect.plot{fill:#fafafa;stroke:#bbb} svg.chart line.grid{stroke:#e4e4e4}
"""

# No script, no request: only inline styles and data: images may load, even if escaping missed something.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _ms(v: float | None) -> str:
    return "not measured" if v is None else f"{v:.3f} ms"


def _y_unit(values: list[float]) -> tuple[str, float]:
    return ("ms", 1e-3) if values and max(values) >= 10_000 else ("µs", 1.0)


def _chart(title: str, series: list[Series], x_max: float, x_label: str = "time", **kw) -> str:
    ys = [y for s in series for _, y in s.points]
    unit, scale = _y_unit(ys)
    scaled = [Series(s.label, [(x, y * scale) for x, y in s.points], s.color) for s in series]
    return step_chart(scaled, title=title, x_label=x_label, y_label=f"best latency ({unit})", x_max=x_max, **kw)


def render(data: ReportData) -> str:
    """The report as a page of its own (``registry report``)."""
    title = f"registry report: {data.model}"
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
    ]
    return "\n".join([*head, content(data), "</body></html>", ""])


def content(data: ReportData, links: bool = False) -> str:
    """The report without its page: the meta line, summary, task table and curves. ``registry report`` writes it in
    a page of its own, the server's model page in the web view's (``links``: task names link to their workloads'
    pages): one report, two outputs."""
    e = escape
    head = [
        f'<div class="meta">model id {data.model_id}, sha256 {e(data.sha256[:16])}…, input shapes '
        f"{e(data.input_shapes)}<br>device {e(data.device or 'none')}; written "
        f"{data.generated_at:%Y-%m-%d %H:%M:%S} UTC"
        + (f"; first record drawn {data.start:%Y-%m-%d %H:%M:%S} UTC" if data.start else "")
        + "</div>",
    ]
    tuned = [t for t in data.tasks if t.curve]
    estimate = sum(t.weight * t.after_us for t in data.tasks if t.after_us is not None)
    summary = [
        f"{len(data.tasks)} tasks, {len(tuned)} with records on this device, "
        f"{sum(t.records for t in data.tasks)} ok records",
        "model estimate: no records on this device"
        if all(t.after_us is None for t in data.tasks)
        else f"model estimate (Σ weight × after): {estimate / 1e3:,.3f} ms"
        + ("" if all(t.after_us is not None for t in data.tasks) else " (tasks without a latency left out)"),
    ]
    if data.untuned_ms is not None or data.final_ms is not None:
        gain = f" ({data.untuned_ms / data.final_ms:.1f}x)" if data.untuned_ms and data.final_ms else ""
        summary.append(f"end to end, this run: untuned {_ms(data.untuned_ms)} → final {_ms(data.final_ms)}{gain}")
    body = ["<ul>" + "".join(f"<li>{e(s)}</li>" for s in summary) + "</ul>"]
    if data.notes:
        body.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in data.notes) + "</ul>")
    body += _table(data, links)
    body.append("<h2>Best latency over time</h2>")
    before = (
        "with its stored default until its first record, else at its first record's latency from the start"
        if data.before_kind == BEFORE_STORED
        else f"with its {e(data.before_kind)} until its first record"
    )
    body.append(
        "<p>From the records' timestamps on this device (time of writing, not of measuring; an imported record "
        "carries its import time). A curve steps down when a faster record is written. The model's curve is "
        f"Σ weight × best so far, each task counted {before}.</p>"
    )
    x_max = data.span_s
    if data.model_curve:
        body.append(_chart(f"model {data.model}: Σ weight × latency", [Series("model", data.model_curve)], x_max))
    charts = [
        _chart(f"{t.name} (×{t.weight})", [Series(t.name, t.curve, PALETTE[i % len(PALETTE)])], x_max, width=440)
        for i, t in enumerate(tuned)
    ]
    body.append('<div class="grid">' + "".join(charts) + "</div>" if charts else "<p>No task has records here.</p>")
    if data.history:
        body += _history(data.history)
    return "\n".join(head + body)


def _table(data: ReportData, links: bool = False) -> list[str]:
    e = escape
    headers = ["task", "weight", "source", "donor", "distance", f"before µs ({data.before_kind})", "after µs"]
    headers += ["speedup", "share", "records", "searched"]
    out = [
        "<h2>Tasks</h2>",
        '<div class="wide"><table><thead><tr>' + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr></thead>",
    ]
    out.append("<tbody>")
    for t in sorted(data.tasks, key=lambda t: -(t.share or 0)):
        speedup = f"{t.before_us / t.after_us:.1f}x" if t.before_us and t.after_us else "-"
        name = e(t.name)
        if links and t.workload:
            name = f'<a href="/workloads/{quote(t.workload, safe="")}">{name}</a>'
        cells = [
            (name, "name"),
            (str(t.weight), "n"),
            (e(t.source), ""),
            (e(t.donor or "-"), "name"),
            ("-" if t.distance is None else f"{t.distance:.1f}", "n"),
            (_us(t.before_us), "n"),
            (_us(t.after_us), "n"),
            (speedup, "n"),
            ("-" if t.share is None else f"{100 * t.share:.1f}%", "n"),
            (str(t.records), "n"),
            (e(searched(t.effort)), ""),
        ]
        out.append("<tr>" + "".join(f'<td class="{c}">{v}</td>' if c else f"<td>{v}</td>" for v, c in cells) + "</tr>")
    out.append("</tbody></table></div>")
    return out


def searched(effort: Effort | None) -> str:
    """How hard tuning runs searched a task: ``64 trials in 30 s, plateau``; ``-`` when no run recorded it."""
    if effort is None:
        return "-"
    return f"{effort.trials} trials in {effort.seconds:.0f} s" + (", plateau" if effort.plateau else "")


def _history(history: list[dict]) -> list[str]:
    """The run's per-batch history (``tune --json``'s ``history``): the model estimate and each task's best."""
    model = [(float(h["seconds"]), float(h["model_us"])) for h in history if h.get("model_us")]
    names: list[str] = []
    for h in history:
        names += [n for n in h.get("best_us", {}) if n not in names]
    series = []
    for i, name in enumerate(names):
        pts: list[tuple[float, float]] = []
        for h in history:
            v = h.get("best_us", {}).get(name)
            if v is not None and (not pts or v < pts[-1][1]):
                pts.append((float(h["seconds"]), float(v)))
        series.append(Series(name, pts, PALETTE[i % len(PALETTE)]))
    x_max = max((float(h["seconds"]) for h in history), default=0.0)
    trials = history[-1].get("trials", 0) if history else 0
    out = [
        "<h2>This run, batch by batch</h2>",
        f"<p>{len(history)} points, {trials} trials counted at the end (stored ones included).</p>",
        _chart("model estimate per batch", [Series("model estimate", model)], x_max),
    ]
    if series:
        out.append(_chart("each task's best per batch", series, x_max, height=300 + 16 * ((len(series) + 2) // 3)))
    return out


# -- files -----------------------------------------------------------------------------------------------------------


MAX_NAME = 100  # characters of a model's name kept in its report's default file name: far below a file name's 255


def default_path(model: str) -> Path:
    """``MODEL.report.html`` here, with every character but ``A-Za-z0-9._-`` of the (untrusted) name replaced. A
    longer name than MAX_NAME is cut there, and a digest of the whole name keeps two such names' reports apart."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._") or "model"
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(model.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:MAX_NAME].rstrip('._')}-{digest}"
    return Path(f"{name}.report.html")


def check_writable(path: Path) -> None:
    """Fail early, in one line, when the report cannot be written there (before a long run, not after)."""
    try:
        problem = _write_problem(path)
    except OSError as err:  # a name the OS refuses: too long, or a loop of links
        problem = err.strerror or type(err).__name__
    if problem:
        raise BadInputError(f"cannot write the report to {_shown(path)}: {problem}")


def _write_problem(path: Path) -> str | None:
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        return "it is a directory"
    if not parent.is_dir():
        return f"no directory {_shown(parent)}"
    if not os.access(path if path.exists() else parent, os.W_OK):
        return "permission denied"
    return None


def _shown(path: Path) -> str:
    """A path as an error line quotes it: one of thousands of characters is cut to its ends."""
    text = str(path)
    return text if len(text) <= 160 else f"{text[:100]}...{text[-40:]} ({len(text)} characters)"


def write(path: Path, page: str) -> None:
    check_writable(path)
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as err:
        raise BadInputError(f"cannot write the report to {path}: {err.strerror}") from None


def write_report(
    store: ReportReads,
    model: str,
    path: Path,
    *,
    device: str | None = None,
    run: ModelReport | None = None,
    sha256: str | None = None,
) -> ReportData:
    data = collect(store, model, device=device, run=run, sha256=sha256)
    write(path, render(data))
    return data


__all__ = [
    "CSS",
    "ReportData",
    "TaskLine",
    "check_writable",
    "collect",
    "content",
    "default_path",
    "render",
    "write",
    "write_report",
]
