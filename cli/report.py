"""``registry report``: one self-contained HTML page about a stored model; and ``--report`` for transfer and tune.

No TVM here: the page is written from the store alone.
"""

from __future__ import annotations

from pathlib import Path

import click

from registry.cli.options import Context, GivenPath, common_options, device_option, given, output_options, pass_ctx
from registry.cli.output import echo_line, echo_model

report_option = click.option(
    "--report",
    "report_path",
    type=GivenPath(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Also write the model's HTML report (as `registry report` does) there at the end, with this run's "
    "before/after and per-batch history.",
)


def check_outputs(ctx: Context, report_path: Path | None, output: Path | None) -> None:
    """Before a long run: a report or library that could not be written, or would land on the registry's own files,
    is refused now, not after the run."""
    ctx.refuse_own_files(("--report", report_path), ("-o", output))
    if report_path is not None:
        from registry.report.html import check_writable

        check_writable(report_path)


def write_run_report(ctx: Context, report_path: Path | None, run_report) -> None:
    """The report of the run that just ended; one line on stderr says where (stdout may be JSON)."""
    if report_path is None:
        return
    from registry.report.html import write_report

    write_report(ctx.store, run_report.model, report_path, run=run_report, sha256=run_report.sha256)
    echo_line(f"report written to {report_path}", err=True)


@click.command()
@click.argument("model", callback=given)
@click.option(
    "-o",
    "--output",
    type=GivenPath(dir_okay=False, path_type=Path),
    help="Where to write the page [default: MODEL.report.html here].",
)
@device_option(
    "`host`, a device id or a name from `registry devices` [default: the device with the most records of the "
    "model's tasks]."
)
@output_options()
@common_options
@pass_ctx
def report(ctx: Context, model: str, output: Path | None, device: str | None, fmt: str) -> None:
    """Write one self-contained HTML page about MODEL (a name or id recorded by transfer or tune).

    The page has the per-task table (source, donor and distance, before -> after, share of the model's latency) and
    best-latency-over-time curves per task and for the model, drawn from the records' timestamps as inline SVG. It
    needs no server, no script and no network: open it from disk, or attach it.

    \b
    Examples:
      registry report resnet50 -o resnet50.html
      registry report bert --device host
    """
    from registry.report.html import check_writable, default_path, write_report

    path = output or default_path(model)
    ctx.refuse_own_files(("-o", path))
    check_writable(path)
    data = write_report(ctx.existing_store, model, path, device=device)
    tuned = sum(1 for t in data.tasks if t.curve)
    if fmt == "json":
        from registry.schemas import ReportOutput

        echo_model(
            ReportOutput(model=data.model, device=data.device, path=str(path), tasks=len(data.tasks),
                         tasks_with_records=tuned)
        )  # fmt: skip
        return
    echo_line(f"report on {data.model} ({len(data.tasks)} tasks, {tuned} with records) written to {path}")
