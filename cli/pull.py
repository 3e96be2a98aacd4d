"""``registry pull``: import a bundle shipped with the package (the starter bundle), or a served registry's records."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from registry.cli.options import (
    NAME,
    Context,
    GivenPath,
    common_options,
    device_option,
    given,
    output_options,
    pass_ctx,
)
from registry.cli.output import Progress, echo_model, echo_rows

token_file_option = click.option(
    "--token-file",
    type=GivenPath(dir_okay=False, path_type=Path),
    help="A file holding the server's token [default: $REGISTRY_TOKEN; none for a public server].",
)

page_size_option = click.option(
    "--page-size",
    type=click.IntRange(1, 100_000),
    default=20_000,
    show_default=True,
    help="Records per page by URL; each page is one transaction, what an interruption can cost.",
)


def remote_filters(command):
    """The filters of a pull or push by URL (the records of a device, team, model, or measured since a time)."""
    for option in reversed(
        [
            device_option("Only records of devices matching this (`host`, an id or a name, as the source names it)."),
            click.option("--team", type=NAME, help="Only records of this team."),
            click.option(
                "--model",
                type=NAME,
                help="Only this model's records: those its runs wrote, and the best of each of its tasks.",
            ),
            click.option("--since", type=click.DateTime(), help="Only records measured at or after this time (UTC)."),
            click.option("--full", is_flag=True, help="Read every matching record again, not only the new ones."),
            page_size_option,
            token_file_option,
        ]
    ):
        command = option(command)
    return command


@click.command()
@click.argument("source", metavar="NAME|URL", default="starter", callback=given)
@click.option("--list", "list_", is_flag=True, help="List the shipped bundles instead of importing one.")
@remote_filters
@output_options("table", "json")
@common_options
@pass_ctx
def pull(
    ctx: Context, source: str, list_: bool, device, team, model, since, full, page_size, token_file, fmt: str
) -> None:
    """Import a bundle shipped with tvm-registry (default: `starter`), or the records of a registry served by
    `registry serve` at URL.

    The starter bundle holds the best schedules of 9 real models (BERT, GPT-2, ViT, ResNet, ConvNeXt, PaddleOCR
    det and cls, magika, each task tuned to 36 or more trials, and a YOLOv8n) on a 2-core x86 CPU; see
    docs/SHARING.md.

    From a URL, only what arrived since the last pull with the same filters is read, in pages of 20,000 records,
    each checked as `registry import` checks a bundle and committed on its own: an interrupted pull resumes where it
    stopped. The token comes from --token-file or $REGISTRY_TOKEN, never from the command line. A page's URL pasted
    from the web view is read as its server's; a model page's (/models/NAME) as `--model NAME` too.

    Records arrive "imported", whatever their source: transfer measures donor schedules on this machine before it
    keeps them, and `registry verify` re-measures them. Pulling twice adds nothing.

    \b
    Examples:
      registry pull
      registry pull --list
      registry pull https://registry.example.com --model bert-base --token-file ~/.registry-token
    """
    from registry.share.remote import is_url, missing_scheme

    if missing_scheme(source):  # `host:8000`: a server's address, not the name of a shipped bundle
        raise click.UsageError(missing_scheme(source))
    if is_url(source):
        if list_:
            raise click.UsageError("--list lists the shipped bundles; it takes no URL")
        _pull_url(ctx, source, device, team, model, since, full, page_size, token_file, fmt)
        return
    given = [o for o, v in (("--device", device), ("--team", team), ("--model", model), ("--since", since),
                            ("--full", full), ("--token-file", token_file)) if v]  # fmt: skip
    if given:
        raise click.UsageError(f"{given[0]} applies to a pull from a URL, not of a shipped bundle")
    from registry.share.starter import shipped, shipped_bundle

    if list_:
        rows = shipped()
        if fmt == "json":
            from registry.schemas import PullListOutput

            echo_model(PullListOutput(rows=[{**dataclasses.asdict(s), "path": str(s.path)} for s in rows]))
            return
        echo_rows(
            "table",
            ["name", "records", "workloads", "models", "created", "MB"],
            [(s.name, s.records, s.workloads, s.models, s.created_at, round(s.bytes / 1e6, 1)) for s in rows],
            right=("records", "workloads", "models", "MB"),
        )
        return
    path = shipped_bundle(source)
    from registry.share.exchange_import import import_bundle

    with Progress("pull") as progress:
        result = import_bundle(ctx.store, path, progress=progress)
    if fmt == "json":
        from registry.cli.logs import import_output

        echo_model(import_output(result))
        return
    more = f"; {result.predictors_new} new predictor(s)" if result.predictors_new else ""
    click.echo(f"{source}: {result.records_new} record(s) new, {result.records_present} already present; "
               f"{result.workloads_new} new workload(s){more}")  # fmt: skip


def _pull_url(ctx: Context, url, device, team, model, since, full, page_size, token_file, fmt) -> None:
    from registry.share.remote import Remote, plan_pull, pull, read_token, server_root

    _, page_model = server_root(url)  # a page's URL pasted from the browser: its server, and the model it shows
    model = model or page_model
    remote = Remote(url, read_token(token_file))
    plan = plan_pull(remote, device, team, model, since)  # before the registry here is opened: a refusal creates none
    with Progress("pull") as progress:
        result = pull(remote, ctx.store, device=device, team=team, model=model, since=since, full=full,
                      page=page_size, progress=progress, plan=plan)  # fmt: skip
    echo_transfer(result, "pulled from", fmt)
    if page_model is not None and model == page_model:
        click.echo(f"(the records of model {page_model!r}, the model the page's URL names)", err=True)


def echo_transfer(result, verb: str, fmt: str) -> None:
    """What a pull or push by URL counted: JSON, or one line."""
    if fmt == "json":
        from registry.schemas import PushOutput

        echo_model(PushOutput(**result.to_dict()))
        return
    more = f", {result.records_skipped} invalid left out" if result.records_skipped else ""
    click.echo(
        f"{result.records_read} record(s) {verb} {result.url} in {result.pages} page(s): {result.records_new} new, "
        f"{result.records_present} already present{more}; {result.workloads_new} new workload(s); "
        f"{result.seconds:.1f} s"
    )
