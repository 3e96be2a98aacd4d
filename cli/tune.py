"""``registry tune``: tune a model's tasks with the registry's engine, writing every record back as it is measured."""

from __future__ import annotations

from pathlib import Path

import click

from registry.cli.model_job import Progress, before_tvm, model_options, print_reports
from registry.cli.options import Context, Duration, FiniteRange, GivenPath, pass_ctx
from registry.cli.report import check_outputs, report_option, write_run_report
from registry.errors import BadInputError
from registry.options import TRIALS_PER_TASK, TUNE, duration_text
from registry.store.validation import MAX_LEASE_S

_FLOOR_HELP = (
    "Measure at least this many candidates of every task of at least --min-share (stored ones counted) before any "
    "task gets more; --min-gain stops none below it. For benchmarks that must tune every task to a depth."
)


@click.command()
@model_options(many=True)
@click.option(
    "--models",
    "models_file",
    type=GivenPath(exists=True, dir_okay=False, path_type=Path),
    help="A file naming models to tune, one per line: PATH [NAME=D1,D2 ...] (input shapes; PATH relative to the "
    "file; # starts a comment). With or instead of MODEL.onnx...",
)
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
    f"[default: {TRIALS_PER_TASK} per task when no --budget is given].",
)
@click.option(
    "--predictor/--no-predictor",
    default=TUNE.predictor,
    show_default=True,
    help="Rank candidates with the device's predictor from `registry predictor train` from the first trial.",
)
@click.option(
    "--keep",
    type=FiniteRange(0.05, 1.0),
    default=TUNE.keep,
    show_default=True,
    help="Share of each batch measured; the predicted-worst rest is dropped unmeasured.",
)
@click.option(
    "--min-gain",
    type=FiniteRange(0.0),
    default=TUNE.min_gain,
    show_default=True,
    help="Stop a task when, for 3 batches running, it gains less than this percent of the model's latency per "
    "minute of tuning.",
)
@click.option(
    "--min-share",
    type=FiniteRange(0.0, 100.0),
    default=TUNE.min_share,
    show_default=True,
    help="Stop a task whose share of the model's latency is below this percent.",
)
@click.option("--floor", type=click.IntRange(0), default=TUNE.floor, show_default=True, help=_FLOOR_HELP)
@click.option(
    "--batch", type=click.IntRange(1), default=TUNE.batch, show_default=True, help="Candidates proposed per batch."
)
@click.option(
    "--plateau",
    type=click.IntRange(1),
    default=TUNE.plateau,
    show_default=True,
    metavar="TRIALS",
    help="A task whose last TRIALS measured trials (every run's) improved its best by under 1% has plateaued: "
    "later runs skip it.",
)
@click.option("--retune", is_flag=True, help="Tune plateaued tasks too, past their plateau.")
@click.option(
    "--lease",
    type=Duration(most=MAX_LEASE_S),
    default=duration_text(TUNE.lease),
    show_default=True,
    help="How long a task stays leased to this run after its last batch, at most 24h. Other runs on the registry "
    "leave it alone meanwhile; if this run is killed, they take it over once the lease expires (or at once after "
    "`registry db release-leases`).",
)
@report_option
@pass_ctx
def tune(
    ctx: Context,
    model_paths,
    models_file,
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
    plateau,
    retune,
    lease,
) -> None:
    """Tune the tasks of MODEL.onnx (or of several models, under one budget), seeded from the registry, and compile
    each model.

    MetaSchedule's evolutionary search runs batch by batch: candidates are ranked by a predictor pre-trained on the
    registry, the predicted-worst are dropped unmeasured, the rest are measured several at a time and the promising
    ones again alone, and each measured record is written to the registry at once. The budget goes to tasks by
    weight x latency; a task stops when it gains too little per minute or is too small a share of the model. An
    interrupted run loses at most one batch: run the same command again to resume.

    Several models are tuned together: a task they share is tuned once, weighted by all of them. Runs that share a
    registry (this machine or others, one PostgreSQL, or a `registry serve` by URL with a writer's token) divide the
    work: each task is leased to the run tuning it, the others tune other tasks first and then wait for its
    records. Each task's effort (trials, seconds, best latency over trials) is recorded, and a task that reached a
    plateau is skipped unless --retune.

    \b
    Examples:
      registry tune bert.onnx --input-shape ids=1,128 --budget 20m
      registry tune resnet.onnx --trials 500 --threads 2 -o resnet.so --json
      registry tune vit.onnx deit.onnx --budget 30m   # on N machines at once: they share the work
      registry tune --models models.txt --trials 2000
      registry tune mlp.onnx --rpc 127.0.0.1:9190:xeon      # measure on RPC servers
      registry tune vit.onnx --db https://registry.example.com --token-file writer.token   # a team's server
    """
    from registry.api import ModelSpec

    specs = [ModelSpec(p, list(input_shapes), None, name) for p in model_paths]
    if models_file is not None:
        specs += read_models_file(models_file)
    if not specs:
        raise BadInputError("name a model to tune: MODEL.onnx..., or --models FILE")
    if len(specs) > 1:
        for flag, given in (("-o/--output", output), ("--report", report_path), ("--name", name)):
            if given is not None:
                raise BadInputError(f"{flag} applies to one model; {len(specs)} models were given")
    check_outputs(ctx, report_path, output)
    before_tvm(threads)
    from registry import api

    with Progress("tune", seconds=seconds) as progress:
        reports = api.tune_models(
            specs, target=target, threads=threads, db=ctx.store, output=output, trials=trials,
            seconds=ctx.left_of(seconds), predictor=predictor, keep=keep, min_gain=min_gain, min_share=min_share,
            floor=floor, batch=batch, plateau=plateau, retune=retune, lease=lease, team=team, rpc=rpc, dop=dop,
            verbose=ctx.verbosity >= 2, exact_math=exact_math, progress=progress,
        )  # fmt: skip
    print_reports(reports, fmt)
    write_run_report(ctx, report_path, reports[0])


def read_models_file(path: Path) -> list:
    """The models a --models file names: ``PATH [NAME=D1,D2 ...]`` per line, PATH relative to the file."""
    from registry.api import ModelSpec

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInputError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    specs = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        model = (path.parent / words[0]).expanduser()
        if not model.is_file():
            raise BadInputError(f"{path}:{number}: no model file {model}")
        shapes = words[1:]
        bad = [w for w in shapes if "=" not in w]
        if bad:
            raise BadInputError(f"{path}:{number}: {bad[0]!r} is not an input shape NAME=D1,D2,...")
        specs.append(ModelSpec(model, shapes))
    if not specs:
        raise BadInputError(f"{path} names no model")
    return specs
