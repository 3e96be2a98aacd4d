"""``registry serve``: the registry over HTTP (``registry.server``): a JSON API, a web view, pushes of bundles."""

from __future__ import annotations

import click

from registry.cli.options import BYTES, Context, FiniteRange, common_options, output_options, pass_ctx
from registry.options import SERVE, size_text

MAX_RATE = 1_000_000  # requests a second: beyond it a limit limits nothing
HEADER_RANGE = (1 << 10, 1 << 20)  # bytes of a request's header block: a browser's needs a few KiB


def _listenable(host: str, port: int) -> None:
    """Refuses, in one line, an address this machine cannot listen on, before anything says it serves (uvicorn
    would log the failure after "serving ... at"). An empty host would make uvicorn listen on every address."""
    import socket

    from registry.errors import BadInputError, RegistryError

    if not host.strip():
        raise BadInputError("--host is empty: name the address to listen on (0.0.0.0 for every one)")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise BadInputError(f"--host {host!r}: not an address of this machine ({e})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port in TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as e:
            raise RegistryError(f"cannot listen on {host!r} port {port}: {e.strerror or e}") from None


def _header_size(ctx, param, value: int) -> int:
    low, high = HEADER_RANGE
    if not low <= value <= high:
        raise click.BadParameter(f"{value:,} bytes is not from {low:,} to {high:,}", ctx, param)
    return value


@click.command()
@click.option("--host", default=SERVE.host, show_default=True, help="The address to listen on (0.0.0.0: every one).")
@click.option(
    "--port", default=SERVE.port, show_default=True, type=click.IntRange(0, 65535), help="The port to listen on."
)
@click.option("--public", is_flag=True, help="Let requests without a token read (tokens are still needed to push).")
@click.option(
    "--workers",
    default=SERVE.workers,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes (one per core serves the most requests).",
)
@click.option(
    "--max-upload",
    default=size_text(SERVE.max_upload),
    show_default=True,
    type=BYTES,
    help="The largest bundle a push may send; a larger one is refused before it is read.",
)
@click.option(
    "--rate-limit",
    default=SERVE.rate_limit,
    show_default=True,
    type=FiniteRange(0, MAX_RATE),
    help="Requests a second one client address may make (bursts of 4x that); 0: no limit.",
)
@click.option(
    "--max-header",
    default=size_text(SERVE.max_header),
    show_default=True,
    type=BYTES,
    callback=_header_size,
    help="The largest header block (request line and headers) a request may send, 1KiB to 1MiB; a larger one gets "
    "431 and is read no further.",
)
@output_options()
@common_options
@pass_ctx
def serve(
    ctx: Context,
    host: str,
    port: int,
    public: bool,
    workers: int,
    max_upload: int,
    rate_limit: float,
    max_header: int,
    fmt: str,
) -> None:
    """Serve this registry over HTTP: a JSON API under /api/v1 (its OpenAPI schema at /openapi.json), a web view
    for people, and pushes of bundles.

    Every request needs a token (`registry token create`) unless --public lets anyone read. Readers read, writers
    also push (`registry push URL`), admins also list and revoke tokens. A pushed bundle is checked as `registry
    import` checks one, and its records arrive "imported". Serve behind a TLS reverse proxy to reach it beyond this
    machine: see docs/SERVER.md.

    \b
    Examples:
      registry token create --role admin --name me       # once: prints a token
      registry serve --db postgresql://registry@db/registry --port 8000
      registry serve --public --workers 2                # a read-only mirror, anonymous readers
    """
    import uvicorn

    from registry.server.app import ServeConfig, create_app, environment, uvicorn_options
    from registry.store.urls import redact

    _listenable(host, port)
    store = ctx.existing_store  # a registry that exists, at this schema: refused here, in one line, if not
    if not public and not store.tokens():
        click.echo(
            "Warning: no token yet: every request will be refused; make one with "
            "`registry token create --role admin --name NAME`",
            err=True,
        )
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            f"Warning: listening on {host} without TLS; put a TLS reverse proxy in front (docs/SERVER.md)", err=True
        )
    config = ServeConfig(
        db=store.url, public=public, max_upload=max_upload, rate=rate_limit, burst=max(1, round(4 * rate_limit)),
        max_header=max_header,
    )  # fmt: skip
    who = "public, read-only for anyone" if public else "a token needed"
    url = f"http://{host}:{port}/"
    if fmt == "json":  # for a supervisor that starts it: where it listens, before it serves
        from registry.cli.output import echo_model
        from registry.schemas import ServeOutput

        echo_model(ServeOutput(url=url, database=redact(store.url), public=public, workers=workers))
    click.echo(f"serving {redact(store.url)} at {url} ({who}); Ctrl-C stops", err=True)
    common = dict(
        host=host, port=port, log_level="warning", proxy_headers=True, server_header=False, **uvicorn_options(config)
    )
    if workers == 1:
        uvicorn.run(create_app(config, store), **common)
        return
    import os

    store.close()
    os.environ.update(environment(config))  # the workers' processes build their app from it
    uvicorn.run("registry.server.app:from_environment", factory=True, workers=workers, **common)
