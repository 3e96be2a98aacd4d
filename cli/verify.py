"""``registry verify``: re-measure imported records here, and mark each verified or disputed."""

from __future__ import annotations

import click

from registry.cli.options import (
    NAME,
    Context,
    FiniteRange,
    common_options,
    device_option,
    output_options,
    pass_ctx,
    served,
)
from registry.cli.output import Progress, echo_model, echo_rows

URL_LIMIT = 10_000  # records a verify by URL re-measures at most: one read's worth of ids


@click.command()
@device_option(
    "The device whose imported records to verify: `host` (this machine), an id or a name. Only a device this "
    "machine is (same CPU or GPU, runtime threads and TVM release) can be verified here.",
    default="host",
    show_default=True,
)
@click.option("--model", type=NAME, help="Only records of this model (its tasks, or records naming it).")
@click.option("--limit", type=click.IntRange(1), help="Verify at most this many records, each pair's best first.")
@click.option(
    "--tolerance",
    type=FiniteRange(1.0),
    default=1.5,
    show_default=True,
    help="A record is disputed when measured here slower than its claimed latency times this.",
)
@output_options("table", "json", "csv")
@common_options
@pass_ctx
def verify(ctx: Context, device: str, model: str | None, limit: int | None, tolerance: float, fmt: str) -> None:
    """Re-measure imported records on this machine and mark each verified or disputed.

    Imported records (from TVM logs, bundles or sync) carry latencies measured elsewhere. Each is rebuilt from its
    trace and timed here; it becomes "verified" when measured within --tolerance of its claim, else "disputed", as
    does one that fails to build or run. The measured latency is kept beside the claimed one (`registry lookup
    --json`: verified_latency_us). Verified records rank with those measured here; disputed ones are never used.
    Each pair's best record is verified first.

    \b
    Examples:
      registry verify                              # every imported record of this machine's devices
      registry verify --model resnet18 --limit 200
      registry verify --device 3 --tolerance 2 --json
      registry lookup --trust verified             # afterwards: only what was measured or verified here
      registry --db https://registry.example.com verify --limit 100   # check a server's claims here; keeps nothing

    By URL (a reader's token) the server's imported records of this machine's device are re-measured here and the
    verdicts printed, not kept: the server keeps only verdicts measured where it runs. At most 10,000 records.
    """
    by_url = served(ctx.url) is not None
    if by_url and (limit is None or limit > URL_LIMIT):
        limit = URL_LIMIT  # one read's worth of record ids (registry.server.storage_api)
    from registry.measure import zygote

    zygote.start_early()  # its TVM import, for the workers, beside this process's
    from registry.share.verify import verify as run_verify

    with Progress("verify") as progress:
        result = run_verify(
            ctx.existing_store, device, model=model, limit=limit, tolerance=tolerance, progress=progress
        )
    if fmt == "json":
        from registry.schemas import VerifyOutput

        echo_model(VerifyOutput.of(result, tolerance))
        return
    if result.records or fmt == "csv":
        echo_rows(
            fmt,
            ["workload", "task", "record", "claimed_us", "measured_us", "ratio", "verdict", "reason"],
            [
                (
                    r.workload,
                    r.task,
                    r.record_id,
                    round(r.claimed_us, 2),
                    None if r.measured_us is None else round(r.measured_us, 2),
                    None if r.ratio is None else round(r.ratio, 2),
                    r.verdict,
                    r.reason,
                )
                for r in result.records
            ],
            right=("record", "claimed_us", "measured_us", "ratio"),
        )
    if fmt == "table" and not ctx.quiet:
        click.echo(summary(result))
        if by_url:
            click.echo(
                "by URL these verdicts are reported, not kept: the server keeps only verdicts measured where it runs "
                "(`registry verify` on its machine)"
            )


def summary(result) -> str:
    """One line: what was verified, at what pace, and what was left for another machine."""
    where = ", ".join(result.devices) or "no device of this machine"
    line = (
        f"{result.count('verified')} verified, {result.count('disputed')} disputed on {where} "
        f"in {result.seconds:.1f} s ({result.records_per_s:.1f} records/s)"
    )
    if result.left_elsewhere:
        others = ", ".join(f"{n} of {name}" for name, n in result.left_elsewhere.items())
        line += f"; left {others}: not this machine's device, verify them where they were measured"
    return line
