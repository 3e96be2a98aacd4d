"""``registry pull``: import a bundle shipped with the package (the starter bundle)."""

from __future__ import annotations

import dataclasses

import click

from registry.cli.options import Context, common_options, output_options, pass_ctx
from registry.cli.output import Progress, echo_model, echo_rows


@click.command()
@click.argument("name", default="starter")
@click.option("--list", "list_", is_flag=True, help="List the shipped bundles instead of importing one.")
@output_options("table", "json")
@common_options
@pass_ctx
def pull(ctx: Context, name: str, list_: bool, fmt: str) -> None:
    """Import a bundle shipped with tvm-registry (default: `starter`), so that a new registry's first `registry
    transfer` finds donors.

    The starter bundle holds the best schedules of 8 real models (BERT, GPT-2, ViT, ResNet, ConvNeXt, PaddleOCR
    det and cls, magika), each task tuned to 36 or more trials on a 2-core x86 CPU; see docs/SHARING.md. Its
    records arrive "imported", like any bundle's: transfer measures donor schedules on this machine before it keeps
    them. Pulling twice adds nothing.

    \b
    Examples:
      registry pull
      registry pull --list
    """
    from registry.share.starter import shipped, shipped_bundle

    if list_:
        rows = shipped()
        if fmt == "json":
            from registry.cli.schemas import PullListOutput

            echo_model(PullListOutput(rows=[{**dataclasses.asdict(s), "path": str(s.path)} for s in rows]))
            return
        echo_rows(
            "table",
            ["name", "records", "workloads", "models", "created", "MB"],
            [(s.name, s.records, s.workloads, s.models, s.created_at, round(s.bytes / 1e6, 1)) for s in rows],
            right=("records", "workloads", "models", "MB"),
        )
        return
    path = shipped_bundle(name)
    from registry.share.exchange_import import import_bundle

    with Progress("pull") as progress:
        result = import_bundle(ctx.store, path, progress=progress)
    if fmt == "json":
        from registry.cli.schemas import ImportOutput

        echo_model(ImportOutput(**dataclasses.asdict(result)))
        return
    click.echo(f"{name}: {result.records_new} record(s) new, {result.records_present} already present; "
               f"{result.workloads_new} new workload(s)")  # fmt: skip
