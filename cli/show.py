"""``registry show``: one workload's best stored schedule as TVMScript, with its trace and provenance."""

from __future__ import annotations

import click

from registry.cli.options import Context, common_options, device_option, given, output_options, pass_ctx
from registry.cli.output import echo_line, echo_model
from registry.errors import BadInputError, UnknownDeviceError


@click.command()
@click.argument("workload", metavar="WORKLOAD", callback=given)
@device_option(
    "`host`, a device id or a name (see `registry devices`); needed when the workload has records on several devices."
)
@click.option("--no-trace", is_flag=True, help="Leave the trace out.")
@output_options()
@common_options
@pass_ctx
def show(ctx: Context, workload: str, device: str | None, no_trace: bool, fmt: str) -> None:
    """Print WORKLOAD's best schedule on a device as TVMScript, with its trace and provenance (read-only).

    WORKLOAD is a structural hash, as `registry lookup` prints it. The schedule is the stored record's trace replayed
    on the stored workload: what `transfer`, `tune` and plain TVM compile with. Provenance: device, source (tuned,
    transferred, imported), the donor of a transferred schedule, latency, team, model, host, TVM release and time.

    \b
    Examples:
      registry show 7683828756812540167 --device host                   # a hash `lookup` printed
      registry lookup --op conv2d --json | jq -r '.rows[].workload'     # the hashes to show
    """
    from registry.store.values import LookupFilter

    store = ctx.existing_store
    device_ids = [d.id for d in store.resolve_devices(device)] if device else None
    rows = store.lookup(LookupFilter(workload=workload.strip(), device_ids=device_ids, top_k=1, limit=1000))
    if not rows:
        where = f" on device {device!r}" if device else ""
        raise BadInputError(f"no ok record of workload {workload!r}{where}; `registry lookup` lists the stored ones")
    if len({r.device_id for r in rows}) > 1:
        names = ", ".join(f"{r.device_id}:{r.device}" for r in rows)
        raise UnknownDeviceError(
            f"workload {workload} has records on several devices ({names}); pick one with --device"
        )
    best = rows[0]
    prov = store.record_provenance(best.record_id)
    from registry.tvm_side.apply_trace import schedule_text

    script, trace = schedule_text(
        prov.mod_json, prov.record.trace_json, workload=prov.workload, record_id=best.record_id
    )
    if fmt == "json":
        from registry.schemas import ShowOutput

        echo_model(
            ShowOutput(
                workload=best.workload,
                task=best.task,
                op=best.op,
                device_id=best.device_id,
                device=best.device,
                record_id=best.record_id,
                latency_us=best.latency_us,
                source=prov.source,
                donor_record_id=prov.donor_record_id,
                donor=prov.donor,
                team=prov.team,
                model=prov.model,
                created_at=prov.created_at,
                tvmscript=script,
                trace=trace,
            )
        )
        return
    donor = "-" if prov.donor_record_id is None else f"record {prov.donor_record_id} ({prov.donor or 'since deleted'})"
    for key, value in (
        ("workload", f"{best.workload} ({best.op}, task {best.task})"),
        ("device", f"{best.device_id}:{best.device} ({best.threads} thread(s))"),
        ("record", f"{best.record_id}, best of {best.records} ok record(s)"),
        ("latency", f"{best.latency_us:.2f} us ({best.gflops:.1f} GFLOP/s)"),
        ("source", prov.source),
        ("donor", donor),
        ("team", prov.team or "-"),
        ("model", prov.model or "-"),
        ("host", prov.host or "-"),
        ("tvm", prov.tvm_version),
        ("time", prov.created_at),
    ):
        echo_line(f"# {key:9} {value}")
    click.echo("")
    click.echo(script.rstrip())
    if not no_trace:
        click.echo("\n# trace (tvm.s_tir.schedule.Trace.as_python):")
        click.echo(trace.rstrip())
