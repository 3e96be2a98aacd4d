"""``registry import`` and ``registry export``: TVM's own log format in and out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from registry import hostinfo
from registry.cli.options import (
    NAME,
    Context,
    GivenPath,
    common_options,
    device_option,
    output_options,
    pass_ctx,
    served,
)
from registry.cli.output import Progress, echo_line, echo_model


@click.command("import")
@click.argument("path", type=GivenPath(path_type=Path))
@click.option("--team", type=NAME, help="Provenance: the team these records come from.")
@click.option("--model", type=NAME, help="Provenance: the model these records were tuned for.")
@click.option(
    "--threads",
    type=click.IntRange(1, hostinfo.MAX_THREADS),
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
    """Import MetaSchedule logs (JSONDatabase files) written by plain TVM, or a registry bundle.

    PATH is a tune_relax work dir, a folder holding several, a database_tuning_record.json, or a bundle written by
    `registry export --bundle` (which carries its own provenance: --team, --model, --threads and --host-model are
    for logs). The import is one transaction: a malformed log or bundle imports nothing. Every record is validated
    against its workload first (its latencies, its target, and a trace that TVM replays exactly); one that is not
    refuses the import, unless --skip-invalid. Imported records are trusted as "imported" until `registry verify`
    re-measures them. Re-importing the same logs or bundle is safe and adds nothing.

    \b
    Examples:
      registry import ./tune_logs --team vision --model resnet18
      registry import team-vision.bundle
    """
    from registry.share.bundle import is_bundle

    if is_bundle(path):
        if any(v is not None for v in (team, model, threads, host_model)):
            raise click.UsageError(
                "--team, --model, --threads and --host-model are for TVM logs; a bundle carries its own provenance"
            )
        from registry.share.exchange_import import import_bundle

        with Progress("import") as progress:
            result = import_bundle(ctx.store, path, skip_invalid=skip_invalid, progress=progress)
        _print_import(result, fmt)
        return
    from registry.share.log_import import import_logs

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
    _print_import(result, fmt)


def _print_import(result, fmt: str) -> None:
    if fmt == "json":
        echo_model(import_output(result))
        return
    click.echo(f"workloads: {result.workloads_new} new, {result.workloads_present} already present")
    click.echo(f"records:   {result.records_new} new, {result.records_present} already present")
    if getattr(result, "predictors_new", 0) or getattr(result, "predictors_present", 0):  # a bundle with predictors
        click.echo(f"predictors: {result.predictors_new} new, {result.predictors_present} already present")
    if result.records_skipped:
        click.echo(f"skipped:   {result.records_skipped} invalid (first: {result.first_skipped})")


def import_output(result):
    """An import's counts as ``--json`` prints them: the fields ImportOutput declares."""
    from registry.schemas import ImportOutput

    return ImportOutput(**_declared(ImportOutput, dataclasses.asdict(result)))


def _declared(schema, fields: dict) -> dict:
    return {k: v for k, v in fields.items() if k in schema.model_fields}


@click.command()
@click.option(
    "-o",
    "--output",
    "folder",
    type=GivenPath(path_type=Path, file_okay=False),
    help="Folder to write database_workload.json and database_tuning_record.json into (TVM's log format).",
)
@click.option(
    "--bundle",
    type=GivenPath(path_type=Path, dir_okay=False),
    help="Write a registry bundle to this file instead: every device's records (or --device's) with provenance, "
    "models and donors, checksummed; `registry import FILE` reads it.",
)
@device_option("`host`, a device id or a name (see `registry devices`); needed for a log when several hold records.")
@click.option("--best-only", is_flag=True, help="Only each workload's best record (per device).")
@click.option("--team", type=NAME, help="Bundle: only records of this team.")
@click.option(
    "--model",
    type=NAME,
    help="Bundle: only this model's records: those its runs wrote, and the best of each of its tasks.",
)
@click.option("--since", type=click.DateTime(), help="Bundle: only records measured at or after this time (UTC).")
@click.option(
    "--no-predictors",
    is_flag=True,
    help="Bundle: leave out the devices' predictors (by default each device's newest of each kind travels).",
)
@output_options()
@common_options
@pass_ctx
def export(ctx: Context, folder: Path | None, bundle: Path | None, device, best_only: bool, team, model, since,
           no_predictors: bool, fmt: str) -> None:  # fmt: skip
    """Export records: one device's as a JSONDatabase that plain TVM loads (-o FOLDER), or any as a bundle that
    keeps their provenance (--bundle FILE). Reads the registry, writes only FOLDER or FILE.

    \b
    Examples:
      registry export -o ./logs --device host --best-only
      # then, in plain TVM:
      #   db = ms.database.JSONDatabase(work_dir="./logs")
      #   ex = ms.relax_integration.compile_relax(db, mod, target, params)
      # (on a CPU, convolutions' records apply through registry.compile_model(mod, db):
      #  the registry tunes them with layout-free weights, another workload for compile_relax)
      registry export --bundle vision.bundle --team vision
    """
    if (folder is None) == (bundle is None):
        raise click.UsageError("give either -o FOLDER (TVM's log format) or --bundle FILE (a registry bundle)")
    from registry.tvm_side.tvmlog import RECORD_FILE, WORKLOAD_FILE  # no TVM: the log format's file names

    logs = [("-o", folder / name) for name in (WORKLOAD_FILE, RECORD_FILE)] if folder is not None else []
    ctx.refuse_own_files(("--bundle", bundle), *logs)
    if bundle is not None:
        if served(ctx.url):
            raise click.UsageError(
                "a served registry's records travel as a pull, not an export: `registry pull URL` (with --device, "
                "--team, --model or --since) into a local registry, then `registry export --bundle FILE` there"
            )
        _export_bundle(ctx, bundle, device, team, model, since, best_only, not no_predictors, fmt)
        return
    if any(v is not None for v in (team, model, since)):
        raise click.UsageError("--team, --model and --since filter bundles (--bundle FILE)")
    if no_predictors:
        raise click.UsageError("--no-predictors is for bundles (--bundle FILE): TVM's logs carry no predictor")
    from registry.share.export import export_database

    by_url = served(ctx.url) is not None  # a server's traces are its claims: none is replayed here
    r = export_database(ctx.existing_store, folder, device, best_only=best_only, replay_plain=not by_url)
    if fmt == "json":
        from registry.schemas import ExportOutput

        echo_model(ExportOutput(folder=str(folder), **dataclasses.asdict(r)))
        return
    echo_line(f"wrote {r.records} record(s) of {r.workloads} workload(s) for device {r.device} to {folder}")
    if by_url:
        echo_line(
            "by URL the registry's schedules are not replayed on the kernels plain TVM extracts otherwise: "
            "`registry pull URL`, then `registry export -o` there, for those too"
        )
    if r.plain_kernels:
        click.echo(
            f"plain TVM: {r.plain_records} of the {r.plain_kernels} kernels it extracts otherwise than the registry "
            f"got the registry's schedule replayed; {len(r.plain_unusable)} did not (they keep TVM's defaults under "
            f"plain compile_relax; compile with the registry's pipeline instead: {folder / 'README.md'})"
        )


def _export_bundle(
    ctx: Context, path: Path, device, team, model, since, best_only: bool, predictors: bool, fmt: str
) -> None:
    from registry.share.export import exchange_filters, export_bundle

    store = ctx.existing_store
    filters = exchange_filters(store, device, team, model, since, best_only)
    info = export_bundle(store, path, filters, predictors=predictors)
    if fmt == "json":
        from registry.schemas import BundleOutput

        echo_model(BundleOutput(**_declared(BundleOutput, {**dataclasses.asdict(info), "path": str(info.path)})))
        return
    click.echo(
        f"wrote {info.records} record(s) of {info.workloads} workload(s), {info.devices} device(s), "
        f"{info.models} model(s) and {info.predictors} predictor(s) to {path} ({info.bytes / 1e6:.1f} MB)"
    )
