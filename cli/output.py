"""Printing: aligned tables for people, JSON (pydantic models, see registry/schemas.py) and CSV for programs; status
lines and progress with an ETA on a terminal, plain lines elsewhere.

Text from a registry's rows (a device's host model, a model, team or task name) is anyone's: a shared registry or an
imported bundle may hold an ANSI escape that clears the reader's terminal or sets its title, a carriage return or
newline that forges a line, or a bidi override that reorders one. Every table cell and every line built from such text
goes through ``printable`` (``echo_line`` does it), which shows each such character escaped as Python's repr does
(``\\x1b``, ``\\n``, ``\\u202e``). JSON escapes them by itself.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import click

from registry.errors import printable


def echo_line(text: str, *, err: bool = False) -> None:
    """One line, on stdout or stderr, with every control or format character in it escaped (see ``printable``): for
    lines that quote a registry's text."""
    click.echo(printable(text), err=err)


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


def echo_model(model) -> None:
    """A pydantic model of registry/schemas.py, as the JSON that docs/JSON.md documents."""
    click.echo(model.model_dump_json(indent=2))


def echo_rows(fmt: str, headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[str] = ()) -> None:
    """Rows as an aligned table or as CSV (JSON is each command's model)."""
    if fmt == "csv":
        buf = io.StringIO()
        out = csv.writer(buf, lineterminator="\n")
        out.writerow(headers)
        out.writerows([["" if c is None else printable(c) for c in row] for row in rows])
        click.echo(buf.getvalue(), nl=False)
        return
    echo_table(headers, rows, right=right)


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[str] = ()) -> None:
    """Columns sized to their widest cell; the ``right`` columns (numbers) aligned right."""
    cells = [[_cell(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if h in right else v.ljust(w) for v, w, h in zip(values, widths, headers, strict=True)]
        return "  ".join(parts).rstrip()

    click.echo(line(list(headers)))
    click.echo("  ".join("-" * w for w in widths))
    for r in cells:
        click.echo(line(r))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.3e}"
    return printable(value)


def _quiet() -> bool:
    from registry.cli.options import current

    return current().quiet


class StatusLine:
    """One overwritten status line on a terminal, wiped at the end (an error then starts a clean line); nothing when
    stderr is a log or a pipe, where a line per step is noise and an error must stay the one line there, or with -q."""

    def __enter__(self):
        self.enabled = sys.stderr.isatty() and not _quiet()
        return self

    def __call__(self, msg: str) -> None:
        if self.enabled:
            click.echo(f"\r{printable(msg)[:79]:79}", nl=False, err=True)

    def __exit__(self, *exc) -> None:
        if self.enabled:
            click.echo("\r" + " " * 79 + "\r", nl=False, err=True)


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """Progress of a job with a known total: a bar with percentage and ETA on a terminal; on a log or a pipe, plain
    lines (from ``every`` seconds in, at most one per ``every`` seconds, and the last); nothing with -q.

    Called as ``progress(done, total, what)``. ``seconds``: a time budget; the ETA is then the earlier of the trial
    count's and the clock's, and a job with only a time budget shows the share of its time spent.
    """

    def __init__(self, label: str, *, seconds: float | None = None, every: float = 5.0) -> None:
        self.label, self.seconds, self.every = label, seconds, every

    def __enter__(self):
        self.start = time.monotonic()
        self.first: int | None = None
        self.tty = sys.stderr.isatty()
        self.quiet = _quiet()
        self.last_plain = -1e9
        self.width = 0
        self.last: tuple[int, int, str] | None = None
        self.lock = threading.Lock()
        self.ended = threading.Event()
        if not self.tty and not self.quiet:  # a log or a pipe hears from a long step too, not only between steps
            threading.Thread(target=self._heartbeat, name="registry-progress", daemon=True).start()
        return self

    def _heartbeat(self) -> None:
        """Every ``every`` seconds without a line, the last state again (its elapsed time moves on): a step that
        takes minutes (one batch of a large convolution) is never a silent stretch."""
        while not self.ended.wait(self.every / 2):
            with self.lock:
                now = time.monotonic()
                if self.last is not None and now - self.start >= self.every and now - self.last_plain >= self.every:
                    self._plain(self.line(*self.last))

    def _plain(self, text: str) -> None:
        self.last_plain = time.monotonic()
        click.echo(text, err=True)

    def note(self, text: str) -> None:
        """A line that must be read (what a job is about to do), printed now, above the bar on a terminal."""
        if self.quiet:
            return
        with self.lock:
            if self.tty and self.width:
                click.echo("\r" + " " * self.width + "\r", nl=False, err=True)
                self.width = 0
            click.echo(printable(text), err=True)
            self.last_plain = time.monotonic()

    def line(self, done: int, total: int, what: str) -> str:
        """``label  37% [######    ] 37/100  elapsed 00:12  ETA 00:20  what``."""
        elapsed = time.monotonic() - self.start
        fractions = []
        if total > 0:
            fractions.append(min(done / total, 1.0))
        if self.seconds:
            fractions.append(min(elapsed / self.seconds, 1.0))
        share = max(fractions) if fractions else None  # the budget that runs out first
        parts = [self.label]
        if share is not None:
            bar = "#" * int(share * 20)
            parts.append(f"{share:4.0%} [{bar:20}]")
        parts.append(f"{done}/{total}" if total > 0 else f"{done}")
        parts.append(f"elapsed {_clock(elapsed)}")
        if self.first is None:
            self.first = done  # a resumed run starts with trials stored by earlier runs: not this run's pace
        etas = []
        if total > 0 and done > self.first:
            etas.append(elapsed * (total - done) / (done - self.first))
        if self.seconds:
            etas.append(self.seconds - elapsed)
        if etas and share:
            parts.append(f"ETA {_clock(min(etas))}")
        if what:
            parts.append(printable(what))
        return "  ".join(parts)

    def __call__(self, done: int, total: int, what: str) -> None:
        if self.quiet:
            return
        with self.lock:
            self.last = (done, total, what)
            self._show(done, total, what)

    def _show(self, done: int, total: int, what: str) -> None:
        text = self.line(done, total, what)
        if self.tty:
            cols = shutil.get_terminal_size((120, 24)).columns - 1  # a longer line would wrap and not be overwritten
            click.echo(f"\r{text[:cols]:{max(self.width, 1)}}", nl=False, err=True)
            self.width = min(len(text), cols)
            return
        now = time.monotonic()
        if now - self.start < self.every:  # a job that ends (or fails) at once leaves stderr to its result or error
            return
        if (total > 0 and done >= total) or now - self.last_plain >= self.every:
            self._plain(text)

    def __exit__(self, *exc) -> None:
        self.ended.set()
        if self.tty and not self.quiet and self.width:
            click.echo("\r" + " " * self.width + "\r", nl=False, err=True)
