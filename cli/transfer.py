"""``registry transfer``: compile a new model with schedules transferred from similar tuned operators."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click
from registry.cli.main import Context, pass_ctx
from registry.cli.output import echo_json, echo_table

THREADS_ENV = "TVM_NUM_THREADS"


@click.command()
@click.argument("model_path", metavar="MODEL.onnx", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    metavar="NAME=D1,D2,...",
    help="Fix an input's shape (repeat per input). Needed for inputs with symbolic dimensions.",
)
@click.option(
    "--budget",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="Candidate schedules measured per task, at most. 3 kept nearly all of 8's speedup at 40% of the search "
    "time in the benchmark.",
)
@click.option(
    "--neighbours", type=click.IntRange(1), default=5, show_default=True, help="Donor workloads considered per task."
)
@click.option(
    "--threads",
    type=click.IntRange(1),
    help=f"Runtime threads to measure and run with [default: ${THREADS_ENV}, else TVM's default, 1 here]. "
    "Records are only reused under the same thread count.",
)
@click.option(
    "--target",
    default="host",
    show_default=True,
    help='"host" (this CPU, with its mcpu), or a TVM target as JSON.',
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Export the compiled library.")
@click.option("--name", help="Model name in the registry [default: the file's stem].")
@click.option("--team", help="Provenance written on the records this run commits.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@pass_ctx
def transfer(
    ctx: Context, model_path: Path, input_shapes, budget, neighbours, threads, target, output, name, team, as_json
) -> None:
    """Transfer-tune MODEL.onnx from the registry and compile it.

    Each task reuses, in this order: an exact record for this device; else the best of the schedules donated by the
    most similar stored operators (FAISS over operator signatures), applied to the task and measured here, if it beats
    TVM's default schedule; else the default. Transferred schedules are written back, naming their donor, so the next
    run of the same model is all exact hits.

    \b
    Examples:
      registry transfer resnet50.onnx --input-shape x=1,3,224,224 -o resnet50.so
      registry transfer bert.onnx --input-shape ids=1,128 --threads 2 --json
    """
    if threads is not None:
        os.environ[THREADS_ENV] = str(threads)  # before TVM's runtime starts its thread pool, which reads it once

    from registry.onnx_prep import parse_input_shapes
    from registry.report import summary_lines, task_table
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target, runtime_threads, target_from_option
    from registry.tvm_side.transfer import TransferOptions
    from registry.tvm_side.transfer import transfer as run_transfer

    start = time.perf_counter()
    shapes = parse_input_shapes(input_shapes)
    tvm_target = host_target() if target == "host" else target_from_option(target)
    loaded = load_onnx(model_path, shapes, name=name or model_path.stem)
    import_s = time.perf_counter() - start
    store = ctx.store
    options = TransferOptions(budget=budget, neighbours=neighbours, team=team, output=output)
    with _Progress() as progress:
        report = run_transfer(
            store, loaded, tvm_target, runtime_threads(), options, progress=progress, import_s=import_s
        )
    if as_json:
        echo_json(report.as_json())
        return
    headers, rows = task_table(report)
    echo_table(headers, rows, right=("weight", "distance", "before µs", "after µs", "speedup"))
    click.echo()
    for line in summary_lines(report):
        click.echo(line)


class _Progress:
    """A progress bar on stderr, one step per task; a line per task when stderr is not a terminal (CI logs)."""

    def __enter__(self):
        self.bar = None
        self.enabled = sys.stderr.isatty()
        return self

    def __call__(self, done: int, total: int, what: str) -> None:
        if not self.enabled:
            click.echo(f"[{done}/{total}] {what}", err=True)
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label="transfer", file=sys.stderr, show_pos=True)
            self.bar.__enter__()
        self.bar.label = f"{what[:40]:40}"
        self.bar.update(done - self.bar.pos)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
