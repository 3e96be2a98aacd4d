"""``registry stats`` and ``registry devices``: what the registry holds."""

from __future__ import annotations

import click
from registry.cli.main import Context, pass_ctx
from registry.cli.output import echo_json, echo_table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@pass_ctx
def stats(ctx: Context, as_json: bool) -> None:
    """Counts of devices, workloads, records and models, by source, operator and device.

    \b
    Example:
      registry stats
    """
    from registry.store.engine import redact

    s = ctx.store.stats()
    if as_json:
        echo_json(s)
        return
    click.echo(f"database   {redact(ctx.store.url)}")
    click.echo(f"devices    {s['devices']}")
    click.echo(f"workloads  {s['workloads']}")
    click.echo(f"records    {s['records']} ({s['records_ok']} ok)")
    click.echo(f"models     {s['models']}")
    if s["records_by_source"]:
        click.echo("by source  " + ", ".join(f"{k} {v}" for k, v in sorted(s["records_by_source"].items())))
    if s["workloads_by_op"]:
        click.echo("by op      " + ", ".join(f"{k} {v}" for k, v in s["workloads_by_op"].items()))
    if s["per_device"]:
        click.echo("")
        echo_table(
            ["device", "tuned workloads", "ok records"],
            [(f"{d['id']}:{d['name']}", d["tuned_workloads"], d["ok_records"]) for d in s["per_device"]],
            right=("tuned workloads", "ok records"),
        )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON, with each device's full target.")
@pass_ctx
def devices(ctx: Context, as_json: bool) -> None:
    """The devices records were measured on. Use an id or name with --device.

    A device is a target (with mcpu and num-cores), a runtime thread count, a CPU or GPU model and a TVM release:
    records are only comparable when all four agree.

    \b
    Example:
      registry devices
    """
    rows = ctx.store.devices()
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no devices yet: tune, transfer or `registry import` some records first", err=True)
        return
    echo_table(
        ["id", "name", "threads", "host", "tvm", "records"],
        [(d["id"], d["name"], d["threads"], d["host_model"], d["tvm_version"], d["records"]) for d in rows],
        right=("id", "threads", "records"),
    )
