"""``registry stats`` and ``registry devices``: what the registry holds."""

from __future__ import annotations

from dataclasses import asdict

import click

from registry.cli.options import Context, common_options, output_options, pass_ctx
from registry.cli.output import echo_line, echo_model, echo_rows
from registry.store.urls import redact


@click.command()
@output_options("table", "json", "csv")
@common_options
@pass_ctx
def stats(ctx: Context, fmt: str) -> None:
    """Counts of devices, workloads, records and models, by source, operator and device (read-only).

    --format csv prints the per-device table.

    \b
    Example:
      registry stats
    """
    store = ctx.existing_store
    s = store.stats()
    if fmt == "json":
        from registry.schemas import StatsOutput

        echo_model(StatsOutput(database=redact(store.url), **asdict(s)))
        return
    per_device = (
        ["device", "tuned workloads", "ok records"],
        [(f"{d.id}:{d.name}", d.tuned_workloads, d.ok_records) for d in s.per_device],
    )
    if fmt == "csv":
        echo_rows(fmt, *per_device)
        return
    echo_line(f"database   {redact(store.url)}")
    click.echo(f"devices    {s.devices}")
    click.echo(f"workloads  {s.workloads}")
    click.echo(f"records    {s.records} ({s.records_ok} ok)")
    click.echo(f"models     {s.models}")
    if s.records_by_source:
        echo_line("by source  " + ", ".join(f"{k} {v}" for k, v in sorted(s.records_by_source.items())))
    if s.workloads_by_op:
        echo_line("by op      " + ", ".join(f"{k} {v}" for k, v in s.workloads_by_op.items()))
    if s.by_team:
        teams = (f"{t.team or '(none)'} {t.records} (last {t.last_at[:10]})" for t in s.by_team[:5])
        echo_line("by team    " + ", ".join(teams))
    if s.per_device:
        click.echo("")
        echo_rows(fmt, *per_device, right=("tuned workloads", "ok records"))


@click.command()
@output_options("table", "json", "csv")
@common_options
@pass_ctx
def devices(ctx: Context, fmt: str) -> None:
    """The devices records were measured on (read-only). Use an id or name with --device; JSON has each device's
    full target.

    A device is a target (with mcpu and num-cores), a runtime thread count, a CPU or GPU model and a TVM release:
    records are only comparable when all four agree.

    \b
    Example:
      registry devices
    """
    rows = ctx.existing_store.devices()
    if fmt == "json":
        from registry.schemas import DevicesOutput

        echo_model(DevicesOutput(rows=[asdict(d) for d in rows]))
        return
    if not rows and fmt == "table":
        if not ctx.quiet:
            click.echo("no devices yet: tune, transfer or `registry import` some records first", err=True)
        return
    echo_rows(
        fmt,
        ["id", "name", "threads", "host", "tvm", "records"],
        [(d.id, d.name, d.threads, d.host_model, d.tvm_version, d.records) for d in rows],
        right=("id", "threads", "records"),
    )
