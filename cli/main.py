"""Entry point: the ``registry`` click group, its global ``--db`` option, and one-line errors."""

from __future__ import annotations

import os
import sys
import warnings

import click

from registry.cli.options import (
    Context,
    configure_logging,
    db_option,
    pass_ctx,
    quiet_option,
    served_token_option,
    verbose_option,
)
from registry.cli.output import printable
from registry.errors import RegistryError, RegistryWarning


class OneLineUsageError(click.UsageError):
    """A usage error as one line, like every other error here (click prints the usage and a hint first)."""

    def show(self, file=None) -> None:
        hint = f" (see `{self.ctx.command_path} --help`)" if self.ctx is not None else ""
        click.echo(f"Error: {printable(self.message)}{hint}", err=True)


def _one_line(e: click.UsageError) -> click.UsageError:
    # a group run without its command shows its help: that is not an error to squeeze into a line
    if isinstance(e, (OneLineUsageError, click.exceptions.NoArgsIsHelpError)):
        return e
    return OneLineUsageError(e.format_message(), e.ctx)


class RegistryGroup(click.Group):
    """Turns the registry's expected errors into one line on stderr and exit code 1 (2 for a command line that does
    not parse), never a traceback."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            raise _one_line(e) from None

    def invoke(self, ctx: click.Context):
        try:
            return self._invoke(ctx)
        except BaseException as e:
            if isinstance(ctx.obj, Context) and not (isinstance(e, SystemExit) and not e.code):
                ctx.obj.undo_new_registry()  # a refused write into a new file leaves no empty registry behind
            raise

    def _invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise _one_line(e) from None
        except RegistryError as e:  # its message may quote a registry's text: escaped, so that it stays one line
            raise click.ClickException(printable(e)) from e
        except KeyboardInterrupt:
            raise click.ClickException("interrupted; what was committed before stays in the registry") from None


@click.group(cls=RegistryGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@db_option(envvar=True)
@served_token_option
@quiet_option
@verbose_option
@click.version_option(package_name="tvm-registry", prog_name="registry")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """A database of TVM MetaSchedule tuning records: keep every tuned schedule, find it, reuse it.

    \b
    Examples:
      registry import ./tune_logs --team vision      # MetaSchedule logs into the registry
      registry lookup --op conv2d --device host      # what is stored?
      registry export -o ./logs --device host        # a JSONDatabase for plain TVM
      registry transfer model.onnx -o model.so       # compile with schedules of similar tuned operators
      registry tune model.onnx --budget 20m          # tune what is left, every record written back
      registry show WORKLOAD --device host           # the best schedule as TVMScript, with its provenance

    --db, -q and -v may also follow the subcommand. Shell completion: see docs/CLI.md.
    """
    obj = ctx.ensure_object(Context)
    ctx.call_on_close(obj.close)
    # a process that runs several commands (a test, a notebook) gets its loggers back as they were
    ctx.call_on_close(lambda: configure_logging(0))
    _one_line_warnings()
    configure_logging(obj.verbosity)
    from registry import hostinfo

    hostinfo.env_threads()  # a $TVM_NUM_THREADS that is no thread count is refused by every command, first


def _one_line_warnings() -> None:
    """The registry's warnings as one ``Warning:`` line on stderr, every time (not Python's file:line form, shown once
    per place); other warnings as Python shows them."""
    warnings.simplefilter("always", RegistryWarning)
    if getattr(warnings.showwarning, "registry", False):
        return
    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RegistryWarning):
            click.echo(f"Warning: {printable(message)}", err=True)
        else:
            default(message, category, filename, lineno, file, line)

    show.registry = True
    warnings.showwarning = show


def _register() -> None:
    from registry.cli import (
        check,
        db,
        index,
        info,
        logs,
        lookup,
        predictor,
        pull,
        push,
        report,
        serve,
        show,
        sync,
        token,
        transfer,
        tune,
        verify,
    )

    cli.add_command(db.db)
    cli.add_command(index.index)
    cli.add_command(logs.import_)
    cli.add_command(logs.export)
    cli.add_command(lookup.lookup)
    cli.add_command(info.stats)
    cli.add_command(info.devices)
    cli.add_command(transfer.transfer)
    cli.add_command(tune.tune)
    cli.add_command(predictor.predictor)
    cli.add_command(report.report)
    cli.add_command(show.show)
    cli.add_command(sync.sync)
    cli.add_command(pull.pull)
    cli.add_command(push.push)
    cli.add_command(serve.serve)
    cli.add_command(token.token)
    cli.add_command(verify.verify)
    cli.add_command(check.check)


_register()


def main() -> None:
    from registry.measure.gpu_state import keep_torch_out

    keep_torch_out()  # TVM's FFI would import torch if installed: seconds of import this process never needs
    try:
        cli(prog_name="registry")
    except Exception as e:  # a bug, not bad input: still one line, with the way to the traceback
        if os.environ.get("REGISTRY_DEBUG"):
            raise
        click.echo(
            printable(f"Error: internal error: {type(e).__name__}: {e} (set REGISTRY_DEBUG=1 for the traceback)"),
            err=True,
        )
        sys.exit(2)


__all__ = ["Context", "cli", "main", "pass_ctx"]
