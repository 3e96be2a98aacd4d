"""What the per-model commands (``transfer``, ``tune``) share: their common options, loading the model, progress,
and printing the report."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import click

from registry import hostinfo
from registry.cli.options import NAME, GivenPath, common_options, output_options, overlay_option, trust_option
from registry.cli.output import Progress, echo_line, echo_model, echo_table


def model_options(command=None, *, many: bool = False):
    """MODEL.onnx and the options every per-model command takes; ``many``: MODEL.onnx... (``registry tune``)."""
    if command is None:
        return functools.partial(model_options, many=many)
    model = GivenPath(exists=True, dir_okay=False, path_type=Path)
    decorators = [
        click.argument("model_paths", metavar="MODEL.onnx...", type=model, nargs=-1)
        if many
        else click.argument("model_path", metavar="MODEL.onnx", type=model),
        click.option(
            "--input-shape",
            "input_shapes",
            multiple=True,
            metavar="NAME=D1,D2,...",
            help="Fix an input's shape (repeat per input). Needed for inputs with symbolic dimensions.",
        ),
        click.option(
            "--threads",
            type=click.IntRange(1, hostinfo.MAX_THREADS),
            help=f"Runtime threads to measure and run with [default: ${hostinfo.THREADS_ENV}, else TVM's default, 1 "
            "here]. Records are only reused under the same thread count.",
        ),
        click.option(
            "--target",
            default="host",
            show_default=True,
            help='"host" (this CPU, with its mcpu), "cuda" (this machine\'s GPU, with its arch and limits), or a TVM '
            "target as JSON.",
        ),
        click.option(
            "-o", "--output", type=GivenPath(dir_okay=False, path_type=Path), help="Export the compiled library."
        ),
        click.option(
            "--exact-math",
            is_flag=True,
            help="On a CPU, keep erf, exp, tanh and softmax exact [default: TVM's fast approximations, within 4e-7 "
            "of exact; libm's erf is a scalar call per element, often the slowest part of a GELU transformer].",
        ),
        click.option("--name", type=NAME, help="Model name in the registry [default: the file's stem]."),
        click.option("--team", type=NAME, help="Provenance written on the records this run commits."),
        click.option(
            "--rpc",
            metavar="HOST:PORT:KEY",
            help="Measure on the TVM RPC servers registered under KEY with this tracker, one job per free server at "
            "a time. Records are filed under the device the servers report.",
        ),
        click.option(
            "--dop",
            type=click.IntRange(1),
            help="Kernels measured at once [default: calibrated on this machine: the most that do not interfere; "
            "with --rpc, one per free server].",
        ),
        trust_option("compilation and tuning start from"),
        overlay_option,
        output_options("table", "json"),
        common_options,
    ]
    return functools.reduce(lambda f, d: d(f), reversed(decorators), command)


def before_tvm(threads: int | None) -> None:
    """What happens before this process imports TVM: the runtime's thread count is set (its thread pool reads the
    variable once), and the measurement workers' zygote starts, so that its TVM import runs beside this process's."""
    from registry.measure import zygote

    if threads is not None:
        os.environ[hostinfo.THREADS_ENV] = str(threads)
    zygote.start_early()


def print_reports(reports: list, fmt: str) -> None:
    """One report as ``print_report`` prints it; several one after the other (``--json``: a JSON array)."""
    if fmt == "json" and len(reports) > 1:
        from registry.schemas import ModelReportList

        echo_model(ModelReportList(reports=[r.as_json() for r in reports]))
        return
    for i, report in enumerate(reports):
        if i:
            click.echo()
        if len(reports) > 1:
            echo_line(f"== {report.model}")
        print_report(report, fmt)


def print_report(report, fmt: str) -> None:
    from registry.report.model_report import summary_lines, task_table

    if fmt == "json":
        from registry.schemas import ModelReportOutput

        echo_model(ModelReportOutput.model_validate(report.as_json()))
        return
    headers, rows = task_table(report)
    numbers = ("weight", "distance", "before µs", "after µs", "speedup", "trials", "proposed", "tune s")
    echo_table(headers, rows, right=numbers)
    click.echo()
    for line in summary_lines(report):
        echo_line(line)


__all__ = ["Progress", "model_options", "print_report", "print_reports", "before_tvm"]
