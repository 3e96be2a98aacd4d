"""``registry db``: schema revisions."""

from __future__ import annotations

import click

from registry.cli.options import Context, common_options, output_options, pass_ctx
from registry.cli.output import echo_model
from registry.config import resolve_database_url
from registry.errors import BadInputError, printable
from registry.store.factory import open_storage
from registry.store.urls import redact
from registry.store.values import READ_ONLY, WRITER


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
    store = open_storage(ctx.url, check_schema=False)
    try:
        before, after = store.upgrade_schema()
        head = store.schema_head()
    finally:
        store.close()
    if fmt == "json":
        from registry.schemas import DbOutput

        echo_model(DbOutput(database=redact(store.url), before=before, revision=after, head=head, up_to_date=True))
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
    store = open_storage(ctx.url, check_schema=False, create_new=False)
    try:
        rev, head = store.schema_revision(), store.schema_head()
    finally:
        store.close()
    if fmt == "json":
        from registry.schemas import DbOutput

        echo_model(DbOutput(database=redact(store.url), revision=rev, head=head, up_to_date=rev == head))
        return
    state = "up to date" if rev == head else ("empty" if rev is None else "needs `registry db upgrade`")
    click.echo(f"database: {redact(store.url)}\nrevision: {rev or '-'} (this registry needs {head}; {state})")


@db.command()
@click.argument("role")
@click.option("--read-only", is_flag=True, help="Read the registry: lookup, stats, devices, export, show.")
@click.option("--writer", is_flag=True, help="Read and write records (import, tune, transfer), not the schema.")
@click.option("--print-sql", is_flag=True, help="Print the SQL for the owner to run (psql) instead of running it.")
@output_options()
@common_options
@pass_ctx
def grant(ctx: Context, role: str, read_only: bool, writer: bool, print_sql: bool, fmt: str) -> None:
    """Make a PostgreSQL ROLE a read-only user or a writer of the registry (run by the owner of its tables).

    The grant is the role's whole access to the registry's tables (what it had before is revoked first), and the
    tables later migrations add follow it. Neither kind of role may change the schema: the owner runs
    `registry db upgrade`. The role must exist (CREATE ROLE reader LOGIN PASSWORD '...'). SQLite has no roles: its
    file's permissions decide. See docs/SHARING.md.

    \b
    Examples:
      registry --db postgresql://registry@db-host/registry db grant reader --read-only
      registry --db postgresql://registry@db-host/registry db grant ci --writer --print-sql | psql ...
    """
    if read_only == writer:
        raise click.UsageError("give one of --read-only and --writer")
    access = READ_ONLY if read_only else WRITER
    url = resolve_database_url(ctx.url)
    if url.split(":", 1)[0].split("+", 1)[0] != "postgresql":  # before opening: a missing SQLite file is no matter
        raise BadInputError(
            f"{redact(url)} is not PostgreSQL: an SQLite registry has no roles; its file's permissions decide who may "
            "read or write it (see docs/SHARING.md)"
        )
    store = open_storage(url, check_schema=False, create_new=False)  # a script (--print-sql) connects to nothing
    try:
        done = store.grant_script(role, access) if print_sql else store.grant_role(role, access)
    finally:
        store.close()
    if fmt == "json":
        from registry.schemas import GrantOutput

        echo_model(
            GrantOutput(
                database=redact(url),
                role=role,
                access=access,
                schema_name=done.schema,
                owner=done.owner,
                sql=done.sql,
                granted=not print_sql,
            )
        )
    elif print_sql:
        click.echo(done.sql, nl=False)
    else:
        click.echo(f"{role}: {access} on the registry in {redact(url)} (schema {done.schema}, owned by {done.owner})")


@db.command("release-leases")
@click.option("--model", help="Only the leases of this model's tasks.")
@click.option(
    "--force",
    is_flag=True,
    help="Also the leases of runs that may still be running (another host's, or a live process here): only when no "
    "`registry tune` uses the registry.",
)
@output_options()
@common_options
@pass_ctx
def release_leases(ctx: Context, model: str | None, force: bool, fmt: str) -> None:
    """Release the leases of tuning runs that have ended, so that the next `registry tune` takes their tasks at once
    instead of waiting for the leases to expire.

    Released: expired leases, leases longer than a lease may be (24h: a crafted row, or one left by an older
    version), and those of a run on this host whose process has ended. A run on another host cannot be checked from
    here: its leases stay until they expire, unless --force. Anyone who may write the registry (a writer, on
    PostgreSQL) may run it; a run whose lease was released loses nothing but the task, which another run may then take.

    \b
    Examples:
      registry db release-leases
      registry db release-leases --model resnet50 --force     # every tune of it is stopped
    """
    from registry.pipeline.effort import may_be_running

    store = open_storage(ctx.url, create_new=False)
    try:
        released, left = store.release_leases(model, (lambda _: False) if force else may_be_running)
    finally:
        store.close()
    if fmt == "json":
        from registry.schemas import ReleaseLeasesOutput

        echo_model(ReleaseLeasesOutput(released=released, left=left))
        return
    click.echo(f"released {released} lease(s)")
    if left:
        runs = printable(", ".join(f"{holder} ({n})" for holder, n in sorted(left.items())))
        click.echo(
            f"left {sum(left.values())} lease(s) of runs that may still be running: {runs} (--force releases them)"
        )
