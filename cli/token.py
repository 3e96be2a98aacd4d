"""``registry token``: the tokens ``registry serve`` admits (made, listed, revoked here, in the registry itself)."""

from __future__ import annotations

import click

from registry.cli.options import NAME, Context, common_options, output_options, pass_ctx
from registry.cli.output import echo_model, echo_rows


@click.group()
def token() -> None:
    """The tokens `registry serve` admits: made, listed and revoked in the registry (by whoever may write it).

    \b
    Roles nest: a reader reads everything, a writer also pushes bundles, an admin also lists and revokes tokens
    over HTTP. Only a token's hash is stored; the token is printed once, when it is made.

    \b
    Examples:
      registry token create --role reader --name ci-readers > reader.token
      registry token list
      registry token revoke ci-readers
    """


@token.command()
@click.option("--role", type=click.Choice(["reader", "writer", "admin"]), required=True, help="What the token may do.")
@click.option("--name", type=NAME, required=True, help="A name to list and revoke it by (who or what uses it).")
@output_options()
@common_options
@pass_ctx
def create(ctx: Context, role: str, name: str, fmt: str) -> None:
    """Make a token and print it, this once (stdout: the token alone; keep it in a file a client reads with
    --token-file, or in $REGISTRY_TOKEN)."""
    from registry.server.auth import digest, new_token

    secret = new_token()
    ctx.store.add_token(name, role, digest(secret))
    if fmt == "json":
        from registry.schemas import TokenCreateOutput

        echo_model(TokenCreateOutput(name=name, role=role, token=secret))
        return
    click.echo(secret)
    click.echo(f"token {name!r} ({role}) made; it is shown only now", err=True)


@token.command(name="list")
@output_options("table", "json", "csv")
@common_options
@pass_ctx
def list_(ctx: Context, fmt: str) -> None:
    """The tokens: name, role, when made, when revoked (never the tokens themselves)."""
    from registry.server.api import token_list

    found = token_list(ctx.existing_store)
    if fmt == "json":
        echo_model(found)
        return
    if not found.rows and fmt == "table":
        click.echo("no tokens yet: `registry token create --role reader --name NAME` makes one", err=True)
        return
    echo_rows(
        fmt,
        ["name", "role", "created", "revoked"],
        [(t.name, t.role, t.created_at or "-", t.revoked_at or "-") for t in found.rows],
    )


@token.command()
@click.argument("name", type=NAME)
@output_options()
@common_options
@pass_ctx
def revoke(ctx: Context, name: str, fmt: str) -> None:
    """Revoke the token NAME: the server refuses it from its next request on."""
    from registry.errors import NotFoundError

    if not ctx.existing_store.revoke_token(name):
        raise NotFoundError(f"no token named {name!r} that is not revoked already (`registry token list`)")
    if fmt == "json":
        from registry.schemas import TokenRevokeOutput

        echo_model(TokenRevokeOutput(name=name))
        return
    click.echo(f"token {name!r} revoked")
