"""``registry predictor``: train a performance predictor on a device's records, and list the stored ones."""

from __future__ import annotations

import click

from registry.cli.options import (
    NAME,
    Context,
    FiniteRange,
    common_options,
    complete_devices,
    device_option,
    output_options,
    pass_ctx,
)
from registry.cli.output import StatusLine, echo_line, echo_model, echo_rows, echo_table
from registry.tvm_side.predictor_blob import KINDS


@click.group()
def predictor() -> None:
    """Pre-trained cost models: XGBoost trained on every workload a device has records of.

    A tuning run that starts from one ranks candidates from its first trial, instead of at random for MetaSchedule's
    first 100 (the One-Shot Tuner idea). Each training is stored as the device's next version.

    \b
    Examples:
      registry predictor train --device host
      registry predictor list
    """


@predictor.command()
@device_option(
    "`host` (this machine), a device id or a name (see `registry devices`).", default="host", show_default=True
)
@click.option(
    "--holdout",
    type=FiniteRange(0, 1, max_open=True),
    default=0.25,
    show_default=True,
    help="Share of the workloads held out to evaluate a model trained without them; 0: no evaluation.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the held-out choice.")
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    default=KINDS[0],
    show_default=True,
    help="xgb-rank-v1: XGBoost ranking each workload's schedules over per-block features and the device's "
    "descriptor (a program scores the sum of its blocks'), ranks for other devices too; xgb-v2: TVM's XGBModel "
    "(regression on normalised throughput).",
)
@click.option(
    "--with-device",
    "with_devices",
    type=NAME,
    multiple=True,
    shell_complete=complete_devices,
    help="Train on this device's records too (repeatable; the same target kind, xgb-rank-v1 only): each program "
    "ranked with its own device's descriptor. The held-out workloads are held out of every device's records.",
)
@output_options()
@common_options
@pass_ctx
def train(
    ctx: Context, device: str, holdout: float, seed: int, kind: str, with_devices: tuple[str, ...], fmt: str
) -> None:
    """Train a predictor on DEVICE's records and store it as the device's next version.

    Whole workloads are held out, not records: the evaluation says how well the model ranks the schedules of an
    operator it has never seen, by TenSet's top-1/top-5 score (the best latency over the best of the 1 or 5 ranked
    highest), Spearman correlation with measured throughput and top-1/top-5 recall, next to what a random ranking
    scores. The stored model is then trained on all workloads.

    With --with-device, it trains on other devices' records too: a device with few records of its own ranks better
    with a like CPU's (docs/BENCHMARKS.md, "Training on several devices from the CLI").

    \b
    Examples:
      registry predictor train --device 1 --holdout 0.3
      registry predictor train --device new-cpu --with-device team-xeon --with-device team-epyc
    """
    from registry.api import train_predictor

    store = ctx.existing_store  # it writes a predictor, but only into a registry with records
    with StatusLine() as progress:
        metrics = train_predictor(
            store, device, with_devices=with_devices, holdout=holdout, seed=seed, kind=kind, progress=progress
        )
    version = metrics["version"]
    if fmt == "json":
        from registry.schemas import PredictorTrainOutput

        echo_model(PredictorTrainOutput(**metrics))
        return
    whose = f" (trained on {metrics['trained_on']})" if "trained_on" in metrics else ""
    echo_line(  # device names are the registry's text
        f"stored predictor v{version} ({kind}) of device {metrics['device']}{whose}: "
        f"{metrics['workloads']} workload(s), {metrics['records']} record(s), "
        f"trained in {metrics['train_seconds']:.1f} s"
    )
    if metrics["skipped_records"]:
        click.echo(f"skipped {metrics['skipped_records']} record(s) whose trace no longer replays on this TVM")
    if "held_out" not in metrics:
        why = "--holdout 0" if holdout == 0 else "the held-out workloads' records do not replay on this TVM"
        click.echo(f"no held-out evaluation ({why})")
        return
    held, rand = metrics["held_out"], metrics["random"]
    click.echo(f"\nheld-out: {held['workloads']} unseen workload(s), {held['records']} record(s)")
    keys = [k for k in held if k.startswith("top")] + ["spearman"]
    keys += [k for k in held if k.startswith(("recall@", "regret@"))]
    echo_table(
        ["metric", "model", "random"],
        [(k, f"{held[k]:.3f}", f"{rand[k]:.3f}") for k in keys],
        right=("model", "random"),
    )


@predictor.command(name="list")
@device_option("Only this device: `host`, a device id or a name.")
@output_options("table", "json", "csv")
@common_options
@pass_ctx
def list_(ctx: Context, device: str | None, fmt: str) -> None:
    """The stored predictors, by device and version: what each was trained on, and its held-out top-1 score (TenSet's:
    the best latency over the latency of the schedule it ranks first, on workloads it never saw), Spearman and top-1
    regret (how much slower its pick is than the best measured one), each beside a random ranking's, and its top-1 on
    devices it never trained on, where it was judged there (the starter bundle's are). JSON: each predictor's full
    evaluation.

    \b
    Example:
      registry predictor list --device host
    """
    from registry.store.values import scores_at, unseen_top1
    from registry.tvm_side.predictor_blob import LEGACY_KIND

    store = ctx.existing_store
    device_id = store.resolve_one_device(device).id if device else None
    rows = store.list_predictors(device_id)
    if fmt == "json":
        from registry.schemas import PredictorListOutput

        echo_model(PredictorListOutput(rows=[r.as_json() for r in rows]))
        return
    if not rows and fmt == "table":
        if not ctx.quiet:
            click.echo("no predictors yet: `registry predictor train` makes one", err=True)
        return

    def held(r, key: str) -> str:
        model, rand = scores_at(r.metrics, "held_out"), scores_at(r.metrics, "random")
        if key not in model or key not in rand:  # none, or made before the metric
            return "-"
        return f"{model[key]:.2f} ({rand[key]:.2f})"

    def unseen(r) -> str:
        return ", ".join(f"{top1:.2f} {name}" for name, top1 in unseen_top1(r.metrics).items()) or "-"

    echo_rows(
        fmt,
        [
            "device",
            "version",
            "kind",
            "trained on",
            "workloads",
            "records",
            "top1 (random)",
            "spearman (random)",
            "regret@1 (random)",
            "top1 on unseen devices",
            "KiB",
            "created",
        ],
        [
            (
                f"{r.device_id}:{r.device}",
                r.version,
                r.kind,
                r.metrics.get("trained_on") or r.metrics.get("device") or "-",
                r.n_workloads,
                r.n_records,
                held(r, "top1"),
                held(r, "spearman"),
                held(r, "regret@1"),
                unseen(r),
                round(r.blob_bytes / 1024),
                r.created_at.strftime("%Y-%m-%d %H:%M") if r.created_at else None,
            )
            for r in rows
        ],
        right=("version", "workloads", "records", "KiB"),
    )
    if any(r.kind == LEGACY_KIND for r in rows):
        click.echo(
            f"predictors of kind {LEGACY_KIND} are in the old format (pickled features) and are never loaded: "
            "retrain them with `registry predictor train`",
            err=True,
        )
