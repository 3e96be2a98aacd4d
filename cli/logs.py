"""``registry import`` and ``registry export``: TVM's own log format in and out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from registry.cli.options import Context, common_options, device_option, output_options, pass_ctx
from registry.cli.output import Progress, echo_model


@click.command("import")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--team", help="Provenance: the team these records come from.")
@click.option("--model", help="Provenance: the model these records were tuned for.")
@click.option(
    "--threads",
    type=click.IntRange(1),
    help="Runtime threads the logs were measured with "
    "[default: this TVM runtime's, i.e. $TVM_NUM_THREADS or 1 here]. TVM's logs do not record it.",
)
@click.option("--host-model", help="CPU/GPU model the logs were measured on [default: this machine's].")
@click.option(
    "--skip-invalid",
    is_flag=True,
    help="Import the valid records and report the invalid ones, instead of refusing the whole import.",
)
@output_options()
@common_options
@pass_ctx
def import_(ctx: Context, path: Path, team, model, threads, host_model, skip_invalid: bool, fmt: str) -> None:
    """Import MetaSchedule logs (JSONDatabase files) written by plain TVM.

    PATH is a tune_relax work dir, a folder holding several, or a database_tuning_record.json. The import is one
    transaction: a malformed log imports nothing. Every record is validated against its workload first (its
    latencies, its target, and a trace that TVM replays exactly); one that is not refuses the import, unless
    --skip-invalid. Re-importing the same logs is safe and adds nothing.

    \b
    Example:
      registry import ./tune_logs --team vision --model resnet18
    """
    from registry.tvm_side.log_import import import_logs

    with Progress("import") as progress:
        result = import_logs(
            ctx.store,
            path,
            team=team,
            model=model,
            num_threads=threads,
            host_model=host_model,
            skip_invalid=skip_invalid,
            progress=progress,
        )
    if fmt == "json":
        from registry.cli.schemas import ImportOutput

        echo_model(ImportOutput(**dataclasses.asdict(result)))
        return
    click.echo(f"workloads: {result.workloads_new} new, {result.workloads_present} already present")
    click.echo(f"records:   {result.records_new} new, {result.records_present} already present")
    if result.records_skipped:
        click.echo(f"skipped:   {result.records_skipped} invalid (first: {result.first_skipped})")


@click.command()
@click.option(
    "-o",
    "--output",
    "folder",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder to write database_workload.json and database_tuning_record.json into.",
)
@device_option("`host`, a device id or a name (see `registry devices`); needed when several exist.")
@click.option("--best-only", is_flag=True, help="Only each workload's best record.")
@output_options()
@common_options
@pass_ctx
def export(ctx: Context, folder: Path, device, best_only: bool, fmt: str) -> None:
    """Export one device's records as a JSONDatabase that plain TVM loads (reads the registry, writes only FOLDER).

    \b
    Example:
      registry export -o ./logs --device host --best-only
      # then, in plain TVM:
      #   db = ms.database.JSONDatabase(work_dir="./logs")
      #   ex = ms.relax_integration.compile_relax(db, mod, target, params)
    """
    from registry.export import export_database

    r = export_database(ctx.existing_store, folder, device, best_only=best_only)
    if fmt == "json":
        from registry.cli.schemas import ExportOutput

        echo_model(ExportOutput(folder=str(folder), **dataclasses.asdict(r)))
        return
    click.echo(f"wrote {r.records} record(s) of {r.workloads} workload(s) for device {r.device} to {folder}")
