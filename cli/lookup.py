"""``registry lookup``: find stored schedules. Must not import TVM: it is the command people run most."""

from __future__ import annotations

import click

from registry.cli.options import NAME, Context, common_options, device_option, output_options, pass_ctx, trust_option
from registry.cli.output import echo_model, echo_rows
from registry.store.factory import open_lookup
from registry.store.query import parse_shape, parse_workload
from registry.store.rows import shapes_text
from registry.store.values import LookupFilter


@click.command()
@click.option(
    "--op", type=NAME, help="Operator kind: conv2d, depthwise_conv2d, matmul, dense, softmax, pool, injective, ..."
)
@click.option("--shape", help="An argument shape the workload must have, e.g. 1,64,56,56.")
@click.option("--dtype", type=NAME, help="An argument dtype the workload must have, e.g. float32.")
@device_option("`host` (this machine), a device id, or a name from `registry devices`.")
@click.option(
    "--model", type=NAME, help="Only workloads of this model (a name recorded by transfer or import --model)."
)
@click.option("--workload", "workload", metavar="HASH", help="One workload, by structural hash.")
@click.option("--top-k", default=1, show_default=True, type=click.IntRange(1, 100), help="Best records per workload.")
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Most (workload, device) pairs to list.",
)
@trust_option("are listed")
@output_options("table", "json", "csv")
@common_options
@pass_ctx
def lookup(ctx: Context, op, shape, dtype, device, model, workload, top_k, limit, fmt) -> None:
    """Find the best stored schedules of the workloads matching every filter (read-only).

    Each row is one workload on one device, with its best record (or the best --top-k).

    \b
    Examples:
      registry lookup --op conv2d --device host
      registry lookup --shape 1,64,56,56 --dtype float32 --top-k 3
      registry lookup --model resnet18 --json
      registry lookup --op matmul --format csv > matmul.csv
    """
    from registry.config import resolve_database_url

    f = LookupFilter(
        op=op,
        shape=parse_shape(shape),
        dtype=dtype,
        model=model,
        workload=parse_workload(workload),
        top_k=top_k,
        limit=limit,
        trust=ctx.trust,
    )
    direct = open_lookup(resolve_database_url(ctx.url))
    if direct is not None:  # the fast path: plain DB-API, no SQLAlchemy
        with direct:
            f.device_ids = [d.id for d in direct.resolve_devices(device)] if device else None
            rows = direct.lookup(f)
    else:  # a fresh database (migrated first), another dialect, or one to explain: through the Store
        store = ctx.existing_store
        f.device_ids = [d.id for d in store.resolve_devices(device)] if device else None
        rows = store.lookup(f)
    if fmt == "json":
        from registry.schemas import LookupOutput

        echo_model(LookupOutput(rows=[r.as_dict() for r in rows]))
        return
    if not rows and fmt == "table":
        if not ctx.quiet:
            click.echo("no stored schedule matches; `registry stats` shows what the registry holds", err=True)
        return
    echo_rows(
        fmt,
        [
            "op",
            "task",
            "shapes",
            "device",
            "rank",
            "latency_us",
            "GFLOP/s",
            "records",
            "source",
            "trust",
            "searched",
            "workload",
        ],  # fmt: skip
        [
            (
                r.op,
                r.task,
                shapes_text(r.args),
                f"{r.device_id}:{r.device}",
                r.rank,
                round(r.latency_us, 2),
                round(r.gflops, 1),
                r.records,
                r.source,
                r.trust,
                searched(r),
                r.workload,
            )
            for r in rows
        ],
        right=("rank", "latency_us", "GFLOP/s", "records"),
    )


def searched(row) -> str:
    """How hard tuning runs searched a row's workload on its device: ``64 trials, plateau`` (empty: unrecorded)."""
    if row.effort_trials is None:
        return ""
    return f"{row.effort_trials} trials" + (", plateau" if row.plateau else "")
