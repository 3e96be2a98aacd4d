"""``registry transfer``: compile a new model with schedules transferred from similar tuned operators."""

from __future__ import annotations

import click

from registry.cli.model_job import Progress, before_tvm, model_options, print_report
from registry.cli.options import Context, Duration, FiniteRange, device_option, pass_ctx
from registry.cli.report import check_outputs, report_option, write_run_report
from registry.errors import BadInputError
from registry.options import MEASURED_CANDIDATES, RANKED_CANDIDATES, TRANSFER, duration_text


@click.command()
@model_options
@click.option(
    "--candidates",
    type=click.IntRange(1),
    default=TRANSFER.candidates,
    help=f"Candidate schedules measured per task, at most [default: {MEASURED_CANDIDATES}: it kept nearly all of 8's "
    f"speedup at 40% of the search time in the benchmark]. With --no-measure, the donor schedules the predictor ranks "
    f"per task; only its pick is built [default: {RANKED_CANDIDATES}].",
)
@click.option(
    "--neighbours",
    type=click.IntRange(1),
    default=TRANSFER.neighbours,
    show_default=True,
    help="Donor workloads considered per task.",
)
@click.option(
    "--tune-trials",
    type=click.IntRange(0),
    default=TRANSFER.tune_trials,
    show_default=True,
    help="Tasks that no donor helped are tuned (as by `registry tune`), seeded with the donors tried, with this "
    "many measured trials each, and so are poor transfers (--retune-below); 0 tunes nothing. A task whose nearest "
    "donor's best is TVM's default (usual for a softmax or a layer norm on a CPU) stays on it: `registry tune` "
    "tunes it if you want.",
)
@click.option(
    "--tune-budget",
    type=Duration(allow_zero=True),
    default=duration_text(TRANSFER.tune_budget),
    show_default=True,
    help="Wall time for the whole command (90s, 5m, ...; 0: tune nothing): those tasks are tuned in what the "
    "transfers leave of it, and the compile at the end is provided for; as it ends, each task's donors get fewer "
    "candidates measured (at least one). Transfer says before tuning how many tasks "
    "it will tune and for how long; those the budget does not reach keep their best transfer or TVM's default, and "
    "`registry tune` goes on from there.",
)
@click.option(
    "--retune-below",
    type=FiniteRange(0, 1),
    default=TRANSFER.retune_below,
    show_default=True,
    help="A transferred schedule that reaches less than this share of the best FLOP rate its donors reached on "
    "their own operators is tuned further, as a task without a donor is; 0: never.",
)
@click.option(
    "--no-measure",
    "no_measure",
    is_flag=True,
    help="Time nothing: each task without a record on the device gets the donor schedule the device's predictor "
    "(or a sibling device's) ranks fastest among those that build; no record is written. For a device this machine "
    "cannot run (--device), or when the compile's minutes matter more than the last 10%.",
)
@device_option("With --no-measure: the registry device to compile for (id or name; default: this machine's).")
@report_option
@pass_ctx
def transfer(
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
    candidates,
    neighbours,
    tune_trials,
    tune_budget,
    retune_below,
    no_measure,
    device,
) -> None:
    """Transfer-tune MODEL.onnx from the registry and compile it.

    Each task reuses, in this order: an exact record for this device; else the best of the schedules donated by the
    most similar stored operators (FAISS over operator signatures), applied to the task and measured here, if it beats
    TVM's default schedule; else the task is tuned briefly (--tune-trials), seeded with those donors. A transferred
    task whose schedule keeps under half its donors' FLOP rate (--retune-below) is tuned briefly too. Everything
    measured is written back, naming its donor, so the next run of the same model is all exact hits.

    \b
    Examples:
      registry transfer resnet50.onnx --input-shape x=1,3,224,224 -o resnet50.so
      registry transfer bert.onnx --input-shape ids=1,128 --threads 2 --candidates 8 --json
      registry transfer vit.onnx --no-measure --device 3 -o vit-xeon.so   # for another CPU, measuring nothing
      registry transfer vit.onnx --db https://registry.example.com --token-file writer.token   # a team's server
    """
    if not no_measure and device is not None:
        raise BadInputError("--device applies with --no-measure: a measured transfer measures on this machine")
    if no_measure and rpc is not None:
        raise BadInputError("--rpc measures on its servers; --no-measure measures nothing: give one of them")
    check_outputs(ctx, report_path, output)
    before_tvm(threads)
    from registry import api

    with Progress("transfer") as progress:
        report = api.transfer(
            model_path, input_shapes=list(input_shapes), name=name, target=target, threads=threads, db=ctx.store,
            output=output, candidates=candidates, neighbours=neighbours, tune_trials=tune_trials,
            tune_budget=ctx.left_of(tune_budget), retune_below=retune_below, team=team, rpc=rpc, dop=dop,
            verbose=ctx.verbosity >= 2, exact_math=exact_math, progress=progress, measure=not no_measure,
            device=device,
        )  # fmt: skip
    print_report(report, fmt)
    write_run_report(ctx, report_path, report)
