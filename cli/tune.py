"""``registry tune``: tune a model's tasks with the registry's engine, writing every record back as it is measured."""

from __future__ import annotations

import click

from registry.cli.model_job import Progress, before_tvm, model_options, print_report
from registry.cli.options import Context, Duration, FiniteRange, pass_ctx
from registry.cli.report import check_outputs, report_option, write_run_report

_FLOOR_HELP = (
    "Measure at least this many candidates of every task of at least --min-share (stored ones counted) before any "
    "task gets more; --min-gain stops none below it. For benchmarks that must tune every task to a depth."
)


@click.command()
@model_options
@click.option(
    "--budget",
    "seconds",
    type=Duration(),
    help="Wall time for the whole command, e.g. 20m: tuning ends early enough to compile and time the tuned model "
    "within it (a batch that would likely overrun is not started).",
)
@click.option(
    "--trials",
    type=click.IntRange(1),
    help="Measured candidates for the model, counting those stored by earlier runs, so a re-run resumes "
    "[default: 32 per task when no --budget is given].",
)
@click.option(
    "--predictor/--no-predictor",
    default=True,
    show_default=True,
    help="Rank candidates with the device's predictor from `registry predictor train` from the first trial.",
)
@click.option(
    "--keep",
    type=FiniteRange(0.05, 1.0),
    default=0.75,
    show_default=True,
    help="Share of each batch measured; the predicted-worst rest is dropped unmeasured.",
)
@click.option(
    "--min-gain",
    type=FiniteRange(0.0),
    default=1.0,
    show_default=True,
    help="Stop a task when, for 3 batches running, it gains less than this percent of the model's latency per "
    "minute of tuning.",
)
@click.option(
    "--min-share",
    type=FiniteRange(0.0, 100.0),
    default=1.0,
    show_default=True,
    help="Stop a task whose share of the model's latency is below this percent.",
)
@click.option("--floor", type=click.IntRange(0), default=0, show_default=True, help=_FLOOR_HELP)
@click.option("--batch", type=click.IntRange(1), default=16, show_default=True, help="Candidates proposed per batch.")
@report_option
@pass_ctx
def tune(
    ctx: Context,
    model_path,
    input_shapes,
    threads,
    target,
    output,
    exact_math,
    name,
    team,
    rpc,
    dop,
    fmt,
    report_path,
    seconds,
    trials,
    predictor,
    keep,
    min_gain,
    min_share,
    floor,
    batch,
) -> None:
    """Tune MODEL.onnx's tasks, seeded from the registry, and compile it.

    MetaSchedule's evolutionary search runs batch by batch: candidates are ranked by a predictor pre-trained on the
    registry, the predicted-worst are dropped unmeasured, the rest are measured several at a time and the promising
    ones again alone, and each measured record is written to the registry at once. The budget goes to tasks by
    weight x latency; a task stops when it gains too little per minute or is too small a share of the model. An
    interrupted run loses at most one batch: run the same command again to resume.

    \b
    Examples:
      registry tune bert.onnx --input-shape ids=1,128 --budget 20m
      registry tune resnet.onnx --trials 500 --threads 2 -o resnet.so --json
      registry tune mlp.onnx --rpc 127.0.0.1:9190:xeon      # measure on RPC servers
    """
    check_outputs(ctx, report_path, output)
    before_tvm(threads)
    from registry import api

    with Progress("tune", seconds=seconds) as progress:
        report = api.tune(
            model_path, input_shapes=list(input_shapes), name=name, target=target, threads=threads, db=ctx.store,
            output=output, trials=trials, seconds=seconds, predictor=predictor, keep=keep, min_gain=min_gain,
            min_share=min_share, floor=floor, batch=batch, team=team, rpc=rpc, dop=dop, verbose=ctx.verbosity >= 2,
            exact_math=exact_math, progress=progress,
        )  # fmt: skip
    print_report(report, fmt)
    write_run_report(ctx, report_path, report)
