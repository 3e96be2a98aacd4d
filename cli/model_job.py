"""What the per-model commands (``transfer``, ``tune``) share: their common options, loading the model, progress,
and printing the report."""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path

import click
from registry.cli.output import echo_json, echo_table

THREADS_ENV = "TVM_NUM_THREADS"


def model_options(command):
    """MODEL.onnx and the options every per-model command takes."""
    decorators = [
        click.argument(
            "model_path", metavar="MODEL.onnx", type=click.Path(exists=True, dir_okay=False, path_type=Path)
        ),
        click.option(
            "--input-shape",
            "input_shapes",
            multiple=True,
            metavar="NAME=D1,D2,...",
            help="Fix an input's shape (repeat per input). Needed for inputs with symbolic dimensions.",
        ),
        click.option(
            "--threads",
            type=click.IntRange(1),
            help=f"Runtime threads to measure and run with [default: ${THREADS_ENV}, else TVM's default, 1 here]. "
            "Records are only reused under the same thread count.",
        ),
        click.option(
            "--target",
            default="host",
            show_default=True,
            help='"host" (this CPU, with its mcpu), "cuda" (this machine\'s GPU, with its arch and limits), or a TVM '
            "target as JSON.",
        ),
        click.option(
            "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Export the compiled library."
        ),
        click.option("--name", help="Model name in the registry [default: the file's stem]."),
        click.option("--team", help="Provenance written on the records this run commits."),
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
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table."),
    ]
    return functools.reduce(lambda f, d: d(f), reversed(decorators), command)


def set_threads(threads: int | None) -> None:
    """Before TVM's runtime starts its thread pool, which reads the variable once."""
    if threads is not None:
        os.environ[THREADS_ENV] = str(threads)


def load_model(model_path: Path, input_shapes, target: str, name: str | None):
    """(loaded model, TVM target, runtime threads or None for the runtime's default, seconds it took)."""
    from registry.onnx_prep import parse_input_shapes
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import target_from_option

    start = time.perf_counter()
    shapes = parse_input_shapes(input_shapes)
    tvm_target = target_from_option(target)
    loaded = load_onnx(model_path, shapes, name=name or model_path.stem)
    threads = int(os.environ[THREADS_ENV]) if os.environ.get(THREADS_ENV, "").isdigit() else None
    return loaded, tvm_target, threads, time.perf_counter() - start


def where(rpc: str | None, dop: int | None):
    """Where to measure, from --rpc and --dop."""
    from registry.measure.tracker import Tracker
    from registry.tvm_side.pipeline import Where

    return Where(rpc=Tracker.parse(rpc) if rpc else None, dop=dop)


def print_report(report, as_json: bool) -> None:
    from registry.report import summary_lines, task_table

    if as_json:
        echo_json(report.as_json())
        return
    headers, rows = task_table(report)
    numbers = ("weight", "distance", "before µs", "after µs", "speedup", "trials", "measured", "tune s")
    echo_table(headers, rows, right=numbers)
    click.echo()
    for line in summary_lines(report):
        click.echo(line)


class Progress:
    """A progress bar on stderr; a line per step when stderr is not a terminal (CI logs)."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __enter__(self):
        self.bar = None
        self.enabled = sys.stderr.isatty()
        return self

    def __call__(self, done: int, total: int, what: str) -> None:
        if not self.enabled or total <= 0:
            click.echo(f"[{done}/{total}] {what}" if total > 0 else f"[{done}] {what}", err=True)
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr, show_pos=True)
            self.bar.__enter__()
        self.bar.label = f"{what[:40]:40}"
        self.bar.update(min(done, total) - self.bar.pos)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
