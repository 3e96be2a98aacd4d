"""``registry check``: replay every stored record on its workload; mark those that do not replay unusable."""

from __future__ import annotations

import click

from registry.cli.options import Context, common_options, device_option, output_options, pass_ctx
from registry.cli.output import Progress, echo_model


@click.command()
@device_option("Only the records of these devices (`host`, an id or a name) [default: every device].")
@click.option("--dry-run", is_flag=True, help="Count the records that do not replay; mark nothing.")
@output_options("table", "json")
@common_options
@pass_ctx
def check(ctx: Context, device: str | None, dry_run: bool, fmt: str) -> None:
    """Replay every stored record's trace on its workload, and mark those that do not replay "disputed".

    A record whose trace does not replay on the workload it is filed under cannot be compiled: compilation skips it
    with a warning and uses the next best record or TVM's default. Every write checks this since version 0.1 of
    the registry's one write path; registries written before (tuning and transfer did not check, and CUDA records
    were made on a module DLight had already scheduled) can hold such records. This finds them with the same check
    and marks them in one transaction; disputed records are never used. Nothing is timed, so any machine can check
    any device's records.

    \b
    Examples:
      registry check                         # every record of every device
      registry check --device cuda-sm_90-h100 --dry-run
      registry check --json
    """
    from registry.records.audit import audit

    with Progress("check") as progress:
        result = audit(ctx.existing_store, device, dry_run=dry_run, progress=progress)
    if fmt == "json":
        from registry.schemas import CheckOutput

        echo_model(CheckOutput.of(result))
        return
    if not ctx.quiet:
        click.echo(summary(result))


def summary(result) -> str:
    """One line: how many records were replayed, how many do not replay, and what was done about them."""
    line = f"{result.checked} record(s) replayed in {result.seconds:.1f} s: "
    line += f"{result.bad} do not replay on their workload"
    if result.bad:
        by_device = ", ".join(f"{n} of {name}" for name, n in result.not_replaying.items())
        line += f" ({by_device}; first: {result.first}); "
        line += "marked disputed, never used again" if result.marked else "nothing marked (--dry-run)"
    return line
