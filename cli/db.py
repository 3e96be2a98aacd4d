"""``registry db``: schema revisions."""

from __future__ import annotations

import click
from registry.cli.options import Context, common_options, output_options, pass_ctx
from registry.cli.output import echo_model


@click.group()
def db() -> None:
    """Inspect and upgrade the database schema.

    A new, empty database is set up automatically. A database written by an older registry is refused until it is
    upgraded with `registry db upgrade` (back up a shared one first).

    \b
    Examples:
      registry db current
      REGISTRY_DATABASE_URL=postgresql://registry@db-host/registry registry db upgrade
    """


@db.command()
@output_options()
@common_options
@pass_ctx
def upgrade(ctx: Context, fmt: str) -> None:
    """Migrate the database to this registry's schema.

    \b
    Example:
      registry --db postgresql://registry@db-host/registry db upgrade
    """
    from registry.store.engine import redact
    from registry.store.interface import open_storage
    from registry.store.revision import HEAD

    store = open_storage(ctx.url, check_schema=False)
    try:
        before, after = store.upgrade_schema()
    finally:
        store.close()
    if fmt == "json":
        from registry.cli.schemas import DbOutput

        echo_model(DbOutput(database=redact(store.url), before=before, revision=after, head=HEAD, up_to_date=True))
        return
    click.echo(
        f"{redact(store.url)}: {before or 'empty'} -> {after}" if before != after else f"already at revision {after}"
    )


@db.command()
@output_options()
@common_options
@pass_ctx
def current(ctx: Context, fmt: str) -> None:
    """Print the database's schema revision and the one this registry needs (read-only: a missing SQLite file is an
    error, and nothing is created).

    \b
    Example:
      registry db current
    """
    from registry.store.engine import redact
    from registry.store.interface import open_storage
    from registry.store.revision import HEAD

    store = open_storage(ctx.url, check_schema=False, create_new=False)
    try:
        rev = store.schema_revision()
    finally:
        store.close()
    if fmt == "json":
        from registry.cli.schemas import DbOutput

        echo_model(DbOutput(database=redact(store.url), revision=rev, head=HEAD, up_to_date=rev == HEAD))
        return
    state = "up to date" if rev == HEAD else ("empty" if rev is None else "needs `registry db upgrade`")
    click.echo(f"database: {redact(store.url)}\nrevision: {rev or '-'} (this registry needs {HEAD}; {state})")
