"""``registry token``: the tokens ``registry serve`` admits (made, listed, revoked here, in the registry itself)."""

from __future__ import annotations

import datetime as dt
import re

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
      registry token create --role admin --name alice --expires 30d > alice.token
      registry token list
      registry token revoke ci-readers
    """


class Lifetime(click.ParamType):
    """How long a token is admitted: a whole number of minutes, hours, days or weeks (``90m``, ``12h``, ``30d``,
    ``2w``), at most ``MAX_DAYS`` days."""

    name = "DURATION"
    UNITS = {"m": dt.timedelta(minutes=1), "h": dt.timedelta(hours=1), "d": dt.timedelta(days=1),
             "w": dt.timedelta(weeks=1)}  # fmt: skip
    MAX_DAYS = 3650

    def convert(self, value, param, ctx) -> dt.timedelta:
        if isinstance(value, dt.timedelta):
            return value
        match = re.fullmatch(r"(\d{1,7})\s*([mhdw])", str(value).strip().lower())
        if not match:
            self.fail(f"{value!r} is not a duration; examples: 90m, 12h, 30d, 2w", param, ctx)
        span = int(match.group(1)) * self.UNITS[match.group(2)]
        if not dt.timedelta(0) < span <= dt.timedelta(days=self.MAX_DAYS):
            self.fail(f"{value!r}: a token lives from a minute to {self.MAX_DAYS} days", param, ctx)
        return span


@token.command()
@click.option("--role", type=click.Choice(["reader", "writer", "admin"]), required=True, help="What the token may do.")
@click.option("--name", type=NAME, required=True, help="A name to list and revoke it by (who or what uses it).")
@click.option(
    "--expires",
    type=Lifetime(),
    default=None,
    help="Refuse the token after this long: 90m, 12h, 30d, 2w (at most 3650d). Default: it never expires, so that "
    "a service's token (CI, a mirror's puller) does not stop working unannounced; give a person's token an expiry, "
    "and revoke any token that is no longer needed.",
)
@output_options()
@common_options
@pass_ctx
def create(ctx: Context, role: str, name: str, expires: dt.timedelta | None, fmt: str) -> None:
    """Make a token and print it, this once (stdout: the token alone; keep it in a file a client reads with
    --token-file, or in $REGISTRY_TOKEN)."""
    from registry.server.auth import digest, new_token

    secret = new_token()
    expires_at = None if expires is None else dt.datetime.now(dt.UTC).replace(microsecond=0) + expires
    ctx.store.add_token(name, role, digest(secret), expires_at)
    if fmt == "json":
        from registry.schemas import TokenCreateOutput

        echo_model(TokenCreateOutput(name=name, role=role, token=secret))
        return
    click.echo(secret)
    until = "it never expires" if expires_at is None else f"it expires at {expires_at.isoformat()}"
    click.echo(f"token {name!r} ({role}) made; {until}; it is shown only now", err=True)


@token.command(name="list")
@output_options("table", "json", "csv")
@common_options
@pass_ctx
def list_(ctx: Context, fmt: str) -> None:
    """The tokens: name, role, when made, when they expire, when revoked (never the tokens themselves)."""
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
        ["name", "role", "created", "expires", "revoked"],
        [(t.name, t.role, t.created_at or "-", t.expires_at or "never", t.revoked_at or "-") for t in found.rows],
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
