"""``registry index``: the similarity index that donor search uses."""

from __future__ import annotations

import dataclasses

import click

from registry.cli.options import Context, common_options, output_options, pass_ctx
from registry.cli.output import echo_model


@click.group()
def index() -> None:
    """The FAISS index over the workloads that have good records.

    It is a cache of the database, kept beside an SQLite file (or in your data folder for a server database), and is
    rebuilt automatically whenever it is out of sync; these commands show and force that.

    \b
    Examples:
      registry index status
      registry index rebuild
    """


def _echo(status, fmt: str) -> None:
    if fmt == "json":
        from registry.schemas import IndexStatusOutput

        echo_model(IndexStatusOutput(**dataclasses.asdict(status)))
        return
    state = "in sync" if status.in_sync else ("stale: rebuilt on next use" if status.exists else "not built yet")
    click.echo(f"index      {status.path}\nstate      {state}")
    click.echo(f"workloads  {status.indexed} indexed, {status.expected} with good records in the database")
    if status.built_at:
        click.echo(f"built at   {status.built_at}")


@index.command()
@output_options()
@common_options
@pass_ctx
def status(ctx: Context, fmt: str) -> None:
    """Whether the index matches the database.

    \b
    Example:
      registry index status --json
    """
    from registry.similarity.index import SimilarityIndex

    _echo(SimilarityIndex(ctx.existing_store).status(), fmt)


@index.command()
@output_options()
@common_options
@pass_ctx
def rebuild(ctx: Context, fmt: str) -> None:
    """Rebuild the index from the database now.

    \b
    Example:
      registry index rebuild
    """
    from registry.errors import RegistryError
    from registry.similarity.index import SimilarityIndex

    index = SimilarityIndex(ctx.existing_store)
    try:
        status = index.rebuild()
    except OSError as e:  # a read-only folder: the index is written beside the database
        raise RegistryError(f"cannot write the similarity index {index.path}: {e.strerror or e}") from None
    _echo(status, fmt)
