"""``registry sync``: copy records from one registry into another, keeping their provenance."""

from __future__ import annotations

import dataclasses

import click

from registry.cli.options import NAME, Context, common_options, device_option, given, output_options, pass_ctx
from registry.cli.output import Progress, echo_model
from registry.cli.pull import page_size_option, token_file_option
from registry.store.factory import open_storage
from registry.store.urls import redact


@click.command()
@click.argument("source", callback=given)
@click.argument("destination", callback=given)
@device_option("Only records of devices matching this (`host`, an id or a name in the source).")
@click.option("--team", type=NAME, help="Only records of this team.")
@click.option(
    "--model", type=NAME, help="Only this model's records: those its runs wrote, and the best of each of its tasks."
)
@click.option("--since", type=click.DateTime(), help="Only records measured at or after this time (UTC).")
@click.option("--full", is_flag=True, help="Read every matching record again, not only those since the last sync.")
@click.option("--skip-invalid", is_flag=True, help="Copy the valid records and report the invalid ones.")
@page_size_option
@token_file_option
@output_options()
@common_options
@pass_ctx
def sync(ctx: Context, source: str, destination: str, device, team, model, since, full: bool, skip_invalid: bool,
         page_size, token_file, fmt: str) -> None:  # fmt: skip
    """Copy SOURCE's records into DESTINATION: SQLite file, PostgreSQL URL, or the http(s):// URL of a registry
    served by `registry serve` on one side (a pull or a push by URL, with the same counts).

    Incremental: only records added to SOURCE since this pair's last sync (with the same filters) are read. Every
    record keeps its origin, team, model, host and measurement time; measurements of one schedule from different
    origins are all kept, and re-syncing adds nothing. Records arrive "imported" (see `registry verify`), and are
    checked as an import checks them, in one transaction: a bad record leaves DESTINATION as it was. An SQLite
    DESTINATION is created if it does not exist; a PostgreSQL one must be a database that exists (empty, or a
    registry: `createdb NAME` makes one). SOURCE must exist. --db is not used: both are named.

    \b
    Examples:
      registry sync team.db postgresql://registry@db-host/registry
      registry sync postgresql://registry@db-host/registry mine.db --model bert-base
      registry sync https://registry.example.com mine.db --token-file ~/.registry-token
    """
    if ctx.db_given:
        raise click.UsageError("sync names its SOURCE and DESTINATION; --db does not apply to it")
    from registry.share.remote import is_url, missing_scheme

    for side in (source, destination):  # `host:8000` would be taken for an SQLite file of that name
        if missing_scheme(side):
            raise click.UsageError(missing_scheme(side))
    if is_url(source) or is_url(destination):
        _sync_url(source, destination, device, team, model, since, full, skip_invalid, page_size, token_file, fmt)
        return
    if token_file is not None:
        raise click.UsageError("--token-file applies to a sync with a registry server's URL")
    from registry.config import database_url
    from registry.share.export import exchange_filters
    from registry.share.sync import sync as run_sync
    from registry.store.factory import file_of
    from registry.store.own_files import refuse_side_file

    for name, side in (("SOURCE", source), ("DESTINATION", destination)):  # `sync a.db a.db-wal`
        path = file_of(database_url(side))
        if path is not None:
            refuse_side_file(path, name)
    src = open_storage(source, create_new=False)
    dst = open_storage(destination)
    try:
        filters = exchange_filters(src, device, team, model, since)
        with Progress("sync") as progress:
            result = run_sync(src, dst, filters, full=full, skip_invalid=skip_invalid, progress=progress)
    finally:
        src.close()
        dst.close()
    if fmt == "json":
        from registry.schemas import SyncOutput

        echo_model(SyncOutput(**dataclasses.asdict(result)))
        return
    more = f", {result.records_skipped} invalid left out" if result.records_skipped else ""
    which = "since the last sync" if result.incremental else "all"
    click.echo(
        f"{result.records_read} record(s) read from {result.source} ({which}): "
        f"{result.records_new} new, {result.records_present} already present{more}; {result.workloads_new} new "
        f"workload(s), {result.models} model(s); {result.seconds:.1f} s"
    )


def _sync_url(source, destination, device, team, model, since, full, skip_invalid, page_size, token_file, fmt) -> None:
    """A sync with a server on one side: a pull from SOURCE's URL, or a push to DESTINATION's."""
    from registry.share.export import exchange_filters, refuse_unmatched
    from registry.share.remote import Remote, is_url, plan_pull, pull, push, read_token, server_root

    if is_url(source) and is_url(destination):
        raise click.UsageError("one side of a sync must be a database: sync through one, or pull on the server")
    if skip_invalid:
        raise click.UsageError("--skip-invalid applies to a sync between databases; a page by URL is whole or refused")
    token = read_token(token_file)
    if is_url(source):
        model = model or server_root(source)[1]  # a model page's URL: that model's records
        remote = Remote(source, token)
        plan = plan_pull(remote, device, team, model, since)  # before DESTINATION is opened: a refusal creates none
        store = open_storage(destination)
        try:
            with Progress("sync") as progress:
                result = pull(remote, store, device=device, team=team, model=model, since=since, full=full,
                              page=page_size, progress=progress, plan=plan)  # fmt: skip
        finally:
            store.close()
    else:
        store = open_storage(source, create_new=False)
        try:
            filters = exchange_filters(store, device, team, model, since)
            refuse_unmatched(store, filters)  # a filter that matches nothing here sends nothing
            result = push(Remote(destination, token), store, filters, full=full, page=page_size)
        finally:
            store.close()
    out = dict(
        source=source if is_url(source) else redact(store.url),
        destination=destination if is_url(destination) else redact(store.url),
        incremental=result.incremental, records_read=result.records_read, records_new=result.records_new,
        records_present=result.records_present, records_skipped=result.records_skipped,
        workloads_new=result.workloads_new, models=result.models, seconds=result.seconds,
    )  # fmt: skip
    if fmt == "json":
        from registry.schemas import SyncOutput

        echo_model(SyncOutput(**out))
        return
    which = "since the last sync" if result.incremental else "all"
    click.echo(
        f"{out['records_read']} record(s) read from {out['source']} ({which}): {out['records_new']} new, "
        f"{out['records_present']} already present; {out['workloads_new']} new workload(s), {out['models']} "
        f"model(s); {out['seconds']:.1f} s"
    )
