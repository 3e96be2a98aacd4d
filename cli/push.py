"""``registry push URL``: this registry's records that a served registry lacks, sent to it as bundles."""

from __future__ import annotations

import click

from registry.cli.options import Context, common_options, given, output_options, pass_ctx
from registry.cli.pull import echo_transfer, remote_filters


@click.command()
@click.argument("url", callback=given)
@remote_filters
@output_options()
@common_options
@pass_ctx
def push(ctx: Context, url: str, device, team, model, since, full, page_size, token_file, fmt: str) -> None:
    """Send this registry's records that the server at URL (`registry serve`) lacks, with their provenance.

    The server keeps how far pushes from this registry with the same filters have come, so only records added since
    are sent, in pages of 20,000, each imported on the server in one transaction: an interrupted push resumes where
    it stopped. The server checks each page as `registry import` checks a bundle (one bad record refuses its page),
    and its records arrive there "imported". Needs a writer's token, from --token-file or $REGISTRY_TOKEN. A --team,
    --model or --device that matches no record here is refused, naming what this registry holds; nothing is sent.

    \b
    Examples:
      registry push https://registry.example.com --token-file ~/.registry-token
      registry push https://registry.example.com --model resnet50 --team vision
    """
    from registry.share.export import exchange_filters, refuse_unmatched
    from registry.share.remote import Remote, is_url, missing_scheme, read_token
    from registry.share.remote import push as run_push

    if missing_scheme(url):
        raise click.UsageError(missing_scheme(url))
    if not is_url(url):
        raise click.UsageError(f"{url!r} is no http:// or https:// URL (`registry sync` copies between databases)")
    remote = Remote(url, read_token(token_file))
    store = ctx.existing_store
    filters = exchange_filters(store, device, team, model, since)
    refuse_unmatched(store, filters)  # before the server is asked anything: a misspelt filter sends nothing
    result = run_push(remote, store, filters, full=full, page=page_size)
    echo_transfer(result, "pushed to", fmt)
