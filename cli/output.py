"""Printing: aligned tables for people, JSON for programs."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


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
    return str(value)


def shapes(args: list[dict[str, Any]]) -> str:
    return ",".join("x".join(map(str, a["shape"])) or "scalar" for a in args)


class StatusLine:
    """One overwritten status line on a terminal, wiped at the end (an error then starts a clean line); nothing when
    stderr is a log or a pipe, where a line per step is noise and an error must stay the one line there."""

    def __enter__(self):
        self.enabled = sys.stderr.isatty()
        return self

    def __call__(self, msg: str) -> None:
        if self.enabled:
            click.echo(f"\r{msg[:79]:79}", nl=False, err=True)

    def __exit__(self, *exc) -> None:
        if self.enabled:
            click.echo("\r" + " " * 79 + "\r", nl=False, err=True)
