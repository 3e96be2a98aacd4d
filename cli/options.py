"""The options every command shares, each defined once (as sqlite-utils does): ``--db``, ``-q/-v``, ``--json`` and
``--format``, ``--device`` with completion of the registry's device names; and the Context they fill in.

``--db`` and ``-q/-v`` are accepted before the subcommand (on the group) and after it (on every command): the one
given after wins. No TVM and no SQLAlchemy here: ``registry lookup`` imports this.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from registry.config import DATABASE_URL_ENV
from registry.store.trust import DEFAULT_TRUST, TRUST_CHOICES

# The Python loggers of MetaSchedule (TVM 0.27 moved it under tvm.s_tir) and of the registry itself.
LOGGERS = ("tvm.meta_schedule", "tvm.s_tir.meta_schedule", "registry")
_HANDLER_NAME = "registry-cli"  # a named handler: tune_relax rebuilds its logging config from handler names


class Context:
    """What every command shares: the database URL, the verbosity, and the storage opened on first use."""

    def __init__(self, url: str | None = None, verbosity: int = 0) -> None:
        self.url = url
        self.verbosity = verbosity  # -1: -q (errors only); 0: default; 1: -v (INFO); 2: -vv (DEBUG)
        self.trust = DEFAULT_TRUST  # --trust: the least trusted records read (registry.store.trust)
        self.overlay: str | None = None  # --overlay: the SQLite file that takes the writes; --db is then only read
        self._store = None
        self._new_file: Path | None = None  # an SQLite registry this command created (see undo_new_registry)
        self.db_given = False  # --db on the command line (not from the environment)
        self.token_file: Path | None = None  # --token-file: a served registry's token (else $REGISTRY_TOKEN)
        self.started = time.perf_counter()  # when this command began: its time budgets count from here

    def left_of(self, budget: float | None) -> float | None:
        """What is left now of a time budget for the whole command (``--budget``, ``--tune-budget``), for the API,
        whose budget counts from its own call: parsing, opening the registry and starting the workers come out of
        it (a 3-minute transfer ended 2 s past). None (no limit) and 0 (none) as given."""
        if not budget:
            return budget
        return max(budget - (time.perf_counter() - self.started), 1e-3)

    @property
    def store(self):
        """The registry, created (and migrated) if it does not exist yet: for the commands that write. With
        --overlay, the registry must exist and is only read; the writes go to the overlay file. A served registry
        (``--db https://...``, transfer and tune only) takes a run's writes through its API
        (``registry.share.served_run``)."""
        if self._store is None and self.overlay is not None:
            from registry.config import resolve_database_url
            from registry.share.overlay import open_overlay
            from registry.store.own_files import refuse_own_file

            refuse_own_file(self.overlay, [resolve_database_url(self.url)], "--overlay")
            token = None
            if served(self.url):
                from registry.share.remote import read_token

                token = read_token(self.token_file)
            self._store = open_overlay(served(self.url) or self.url, self.overlay, trust=self.trust, token=token)
        elif self._store is None and served(self.url):
            from registry.share.remote import read_token
            from registry.share.served_run import open_served_run

            self._store = open_served_run(served(self.url), read_token(self.token_file), trust=self.trust)
        elif self._store is None:
            from registry.config import resolve_database_url
            from registry.store.factory import file_of, not_writable, open_storage, read_only_uri

            path = file_of(resolve_database_url(self.url))
            self._new_file = path if path is not None and not path.exists() else None
            if path is not None and read_only_uri(path) is not None:  # before any work, not at its end
                from registry.errors import DatabaseError

                raise DatabaseError(not_writable(path))
            self._store = open_storage(self.url, trust=self.trust)
        return self._store

    def undo_new_registry(self) -> None:
        """After a command failed: the SQLite registry it created, if it holds no record, is removed with its side
        files, so that a refused import into a new file leaves nothing behind (a registry with a record stays)."""
        if self._new_file is None and self._store is not None and hasattr(self._store, "drop_if_unused"):
            self._store.drop_if_unused()  # a server database: its tables go, the database stays (empty) as it was
        if self._new_file is None or self._store is None:
            return
        try:
            empty = not any(d.records for d in self._store.devices())
        except Exception:  # noqa: BLE001 - a registry that cannot even be read back is not one to keep either
            empty = True
        self._store.close()
        self._store = None
        if empty:
            side = [Path(f"{self._new_file}{s}") for s in ("-wal", "-shm")] + [
                self._new_file.with_suffix(".migrate.lock")
            ]
            for path in (self._new_file, *side):
                path.unlink(missing_ok=True)

    @property
    def existing_store(self):
        """The registry, which must exist already: for the commands that only read. A missing SQLite file or folder,
        or a database without a registry, is one error line, and nothing is created (no file, folder, lock file or
        table)."""
        if self._store is None and served(self.url):
            from registry.share.remote import read_token
            from registry.share.rest_storage import open_served

            self._store = open_served(served(self.url), read_token(self.token_file))
        elif self._store is None:
            from registry.store.factory import open_storage

            self._store = open_storage(self.url, create_new=False, trust=self.trust)
        return self._store

    def refuse_own_files(self, *outputs: tuple[str, Path | str | None]) -> None:
        """Before a command writes files, given as (option, path) pairs: none may be one of the files of this
        registry or of the --overlay (the database, its journal and side files, the similarity index), nor those of
        any other registry (an SQLite database and the files beside it): a careless path would destroy it."""
        from registry.config import resolve_database_url
        from registry.store.own_files import refuse_own_file, refuse_registry_file

        urls = [resolve_database_url(self.url), *([resolve_database_url(self.overlay)] if self.overlay else [])]
        if served(self.url) and not self.overlay:  # a run against a server writes to this machine's outbox for it
            from registry.share.served_run import outbox_path

            urls.append(f"sqlite:///{outbox_path(served(self.url))}")
        for option, path in outputs:
            if path is not None:
                refuse_own_file(path, urls, option)
                refuse_registry_file(path, option)

    @property
    def quiet(self) -> bool:
        return self.verbosity < 0

    def close(self) -> None:
        """Give the database connections back when the command ends (a process running several commands, such as
        a test, would otherwise keep a pool per command)."""
        if self._store is not None:
            self._store.close()


pass_ctx = click.make_pass_decorator(Context, ensure=True)


class Name(click.ParamType):
    """A name or filter value (a team, model, task, operator kind, device): printable text, not empty. A newline or
    an ANSI escape in a name would forge lines in every table that prints it; an empty filter matches nothing."""

    name = "text"

    def convert(self, value, param, ctx):
        from registry.store.validation import name_problem

        problem = name_problem(value, "the value")
        if problem:
            self.fail(problem, param, ctx)
        return value


NAME = Name()


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


class Duration(click.ParamType):
    """``90s``, ``20m``, ``1h30m`` or plain seconds, as seconds; ``allow_zero``: 0 too (a step it turns off);
    ``most``: the longest accepted, in seconds."""

    name = "DURATION"

    def __init__(self, allow_zero: bool = False, most: float | None = None) -> None:
        self.allow_zero, self.most = allow_zero, most

    def convert(self, value, param, ctx) -> float:
        if isinstance(value, float):
            return value
        match = _DURATION.match(str(value).strip())
        if not match or not any(match.groups()):
            self.fail(f"{value!r} is not a duration; examples: 90s, 20m, 1h30m", param, ctx)
        hours, minutes, seconds = (float(g or 0) for g in match.groups())
        total = hours * 3600 + minutes * 60 + seconds
        if total < 0 or (total == 0 and not self.allow_zero):
            self.fail("the budget must be positive", param, ctx)
        if self.most is not None and total > self.most:
            self.fail(f"{str(value)[:20]} is longer than the most it may be, {self.most / 3600:g}h", param, ctx)
        return total


class Bytes(click.ParamType):
    """``256MB``, ``1GB``, ``64KB`` or a plain byte count (KB, MB, GB: powers of 1000; KiB, MiB, GiB: of 1024)."""

    name = "SIZE"
    UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)", str(value).strip())
        unit = match and self.UNITS.get(match.group(2).upper())
        if not unit:
            self.fail(f"{value!r} is not a size; examples: 256MB, 1GB, 65536", param, ctx)
        size = float(match.group(1)) * unit
        if not math.isfinite(size):  # 400 digits: past any float, and int() of an infinity raises
            self.fail(f"{str(value)[:20]}... is larger than any size", param, ctx)
        size = int(size)
        if size < 1:
            self.fail("the size must be at least one byte", param, ctx)
        return size


BYTES = Bytes()


class FiniteRange(click.FloatRange):
    """click.FloatRange that refuses NaN and the infinities. A NaN fails every comparison, so a range check written
    `value < min` lets it through (`verify --tolerance nan` marked every record verified); no option of the registry
    means anything by an infinity either."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def current() -> Context:
    """The running command's Context (a default one outside a command)."""
    ctx = click.get_current_context(silent=True)
    found = ctx.find_object(Context) if ctx is not None else None
    return found if found is not None else Context()


# -- verbosity ----------------------------------------------------------------------------------------------------


def configure_logging(verbosity: int) -> None:
    """-q: errors only (no warnings, no progress); default: the registry's warnings, MetaSchedule at WARNING; -v:
    MetaSchedule's and the registry's own log at INFO on stderr; -vv: at DEBUG."""
    from registry import verbosity as level_of

    level = logging.ERROR if verbosity < 0 else {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    level_of.set_meta_schedule_level(level)
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        mine = [h for h in logger.handlers if h.get_name() == _HANDLER_NAME]
        if verbosity > 0 and not mine:
            handler = logging.StreamHandler(sys.stderr)
            handler.set_name(_HANDLER_NAME)
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s", "%H:%M:%S"))
            logger.addHandler(handler)
        elif verbosity <= 0:
            for handler in mine:
                logger.removeHandler(handler)
    from registry.errors import RegistryWarning

    warnings.simplefilter("ignore" if verbosity < 0 else "always", RegistryWarning)


def _add_verbosity(delta: int) -> Callable:
    def callback(ctx: click.Context, _param, value) -> None:
        count = value if isinstance(value, int) else int(bool(value))
        if count and not ctx.resilient_parsing:
            obj = ctx.ensure_object(Context)
            obj.verbosity = -1 if delta < 0 else max(obj.verbosity, 0) + count
            configure_logging(obj.verbosity)

    return callback


class GivenPath(click.Path):
    """``click.Path`` that refuses an empty string, which it would make the current folder ("." : `import ""` read
    every file under it, `export -o ""` wrote into it)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("is empty: name a file or folder", param, ctx)
        return super().convert(value, param, ctx)


def given(ctx: click.Context, param, value):
    """A callback refusing an empty argument (a registry, a URL, a workload): "" named the default registry, or
    matched anything."""
    if isinstance(value, str) and not value.strip():
        raise click.BadParameter("is empty", ctx, param)
    return value


def _set_db(ctx: click.Context, param, value: str | None) -> None:
    given(ctx, param, value)
    if value is not None and not ctx.resilient_parsing:
        obj = ctx.ensure_object(Context)
        obj.url = value
        obj.db_given = obj.db_given or ctx.get_parameter_source(param.name) == click.core.ParameterSource.COMMANDLINE


DB_HELP = (
    "Database: a SQLAlchemy URL or a path to an SQLite file "
    f"[env {DATABASE_URL_ENV}; default: an SQLite file under the per-user data dir]. "
    "Example: postgresql://registry@db-host/registry or ./team.db. "
    "Or the http(s):// URL of a `registry serve`: lookup, show, stats, devices, report, export -o and verify read it "
    "(a reader's token), transfer and tune run against it (a writer's token: records pushed there, leases taken "
    "there; with --overlay FILE only read). Token from --token-file FILE or $REGISTRY_TOKEN"
)

# The commands that read a served registry by URL (``--db http(s)://...``): every other one writes or measures.
READS_BY_URL = ("lookup", "show", "stats", "devices", "report", "export", "verify")
# The commands that run a model against it: their records are pushed to it and their leases taken there
# (``registry.share.served_run``; a writer's token), or, with ``--overlay FILE``, written to that file only.
OVERLAY_BY_URL = ("transfer", "tune")


def served(url: str | None) -> str | None:
    """The registry server's URL that ``--db`` (or $REGISTRY_DATABASE_URL) names; None for a database."""
    from registry.config import resolve_database_url

    resolved = resolve_database_url(url)
    return resolved if resolved.startswith(("http://", "https://")) else None


def refuse_served_writes() -> None:
    """A command other than ``READS_BY_URL`` and ``OVERLAY_BY_URL`` given a served registry: one line, exit 2,
    naming what works instead."""
    ctx = click.get_current_context()
    command = " ".join(ctx.command_path.split()[1:])
    url = served(current().url)
    if url is not None and command not in READS_BY_URL + OVERLAY_BY_URL:
        from registry.store.urls import redact

        raise click.UsageError(
            f"`registry {command}` works on a database, not on the served registry {redact(url)[:100]}; by URL "
            f"the registry reads ({', '.join(READS_BY_URL)}) and runs models ({', '.join(OVERLAY_BY_URL)}): "
            "`registry pull URL` into a local registry, work there, then `registry push URL`"
        )


def _set_token_file(ctx: click.Context, _param, value: Path | None) -> None:
    if value is not None and not ctx.resilient_parsing:
        ctx.ensure_object(Context).token_file = value


served_token_option = click.option(
    "--token-file",
    type=GivenPath(dir_okay=False, path_type=Path),
    metavar="FILE",
    expose_value=False,
    callback=_set_token_file,
    help="The token (its first line) of the served registry --db names by URL [default: $REGISTRY_TOKEN; none for "
    "a --public server]. Example: registry --db https://registry.example.com --token-file ~/.registry-token lookup",
)


def db_option(*, envvar: bool = False) -> Callable:
    """--db URL|PATH. On the group it reads the environment too; after the subcommand it only overrides."""
    return click.option(
        "--db",
        metavar="URL|PATH",
        expose_value=False,
        is_eager=True,
        callback=_set_db,
        envvar=DATABASE_URL_ENV if envvar else None,
        help=DB_HELP,
    )


verbose_option = click.option(
    "-v",
    "--verbose",
    count=True,
    expose_value=False,
    callback=_add_verbosity(+1),
    help="Show MetaSchedule's and the registry's log on stderr (-v: INFO, -vv: DEBUG).",
)
quiet_option = click.option(
    "-q", "--quiet", is_flag=True, expose_value=False, callback=_add_verbosity(-1), help="Print only errors on stderr."
)


def common_options(command: Callable) -> Callable:
    """--db, -q and -v: on every command, so that they may follow the subcommand. A command not in
    ``READS_BY_URL`` refuses a served registry (``--db http(s)://...``) before it starts; those in it take the
    server's --token-file after the subcommand too."""

    if isinstance(command, click.Command):  # a command made already: the options alone
        return db_option()(quiet_option(verbose_option(command)))

    @functools.wraps(command)
    def checked(*args, **kwargs):
        refuse_served_writes()
        return command(*args, **kwargs)

    checked = served_token_option(checked) if command.__name__ in READS_BY_URL + OVERLAY_BY_URL else checked
    return db_option()(quiet_option(verbose_option(checked)))


# -- output -------------------------------------------------------------------------------------------------------

FORMATS = ("table", "json", "csv")


def output_options(*formats: str) -> Callable:
    """``--json`` (every command) and, where rows are printed, ``--format table|json|csv``. The command receives
    ``fmt``: one of ``formats`` ("table" for the text a person reads)."""
    formats = formats or ("table", "json")

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def wrapper(*args, as_json: bool = False, fmt: str | None = None, **kwargs):
            if as_json and fmt not in (None, "json"):
                raise click.UsageError(f"--json and --format {fmt} disagree; give one")
            return command(*args, fmt="json" if as_json else (fmt or "table"), **kwargs)

        wrapper = click.option(
            "--json", "as_json", is_flag=True, help="Print one JSON object (see docs/JSON.md) instead of text."
        )(wrapper)
        if len(formats) > 2:
            wrapper = click.option(
                "--format",
                "fmt",
                type=click.Choice(formats),
                help="Output format [default: table]; --json is --format json.",
            )(wrapper)
        return wrapper

    return decorate


# -- devices ------------------------------------------------------------------------------------------------------


def complete_devices(ctx: click.Context, _param, incomplete: str) -> list:
    """Shell completion of --device: ``host``, then the registry's device names and ids. Reads only an existing
    registry, quickly and silently: completion must never create a database nor print an error."""
    from click.shell_completion import CompletionItem

    items = [CompletionItem("host", help="this machine")]
    try:
        from registry.config import resolve_database_url
        from registry.store.factory import open_lookup

        url = ctx.find_object(Context).url if ctx.find_object(Context) else None
        direct = open_lookup(resolve_database_url(url))
        if direct is not None:
            with direct:
                for d in direct.all_devices():
                    items.append(CompletionItem(d.name, help=f"device {d.id}, {d.host_model}, TVM {d.tvm_version}"))
                    items.append(CompletionItem(str(d.id), help=d.name))
    except Exception:  # noqa: BLE001 - a completion that fails offers what it has
        pass
    seen: set[str] = set()
    out = []
    for item in items:
        if item.value.startswith(incomplete) and item.value not in seen:
            seen.add(item.value)
            out.append(item)
    return out


def device_option(help: str, **kwargs) -> Callable:  # noqa: A002 - click's own name
    return click.option("--device", type=NAME, help=help, shell_complete=complete_devices, **kwargs)


def trust_option(what: str) -> Callable:
    """``--trust imported|verified``: which records ``what`` reads (the choices are registry.store.trust's)."""

    def remember(ctx: click.Context, _param, value: str) -> str:
        ctx.ensure_object(Context).trust = value
        return value

    return click.option(
        "--trust",
        type=click.Choice(TRUST_CHOICES),
        default=DEFAULT_TRUST,
        show_default=True,
        expose_value=False,
        callback=remember,
        help=f"Which records {what}: `verified` only those measured here or re-measured by `registry verify`; "
        "`imported` also records imported (from logs, bundles or sync) and not yet verified. Records measured here "
        "or verified are preferred either way; disputed ones are never used.",
    )


def overlay_option(command: Callable) -> Callable:
    """``--overlay FILE``: read the --db registry without writing to it; write to this SQLite file instead."""

    def remember(ctx: click.Context, _param, value: str | None) -> str | None:
        if value is not None:
            ctx.ensure_object(Context).overlay = value
        return value

    return click.option(
        "--overlay",
        metavar="FILE",
        type=GivenPath(dir_okay=False),
        expose_value=False,
        callback=remember,
        help="Write everything this run records (the model, its tasks, the records measured) to this SQLite file, "
        "created if missing, and only read the --db registry, preferring the overlay's records: for a read-only "
        "role on a shared registry. `registry sync FILE SHARED` pushes the overlay later.",
    )(command)


__all__: Sequence[str] = [
    "Context",
    "Duration",
    "FiniteRange",
    "NAME",
    "common_options",
    "complete_devices",
    "configure_logging",
    "current",
    "db_option",
    "device_option",
    "output_options",
    "overlay_option",
    "pass_ctx",
    "served",
    "served_token_option",
    "trust_option",
]
