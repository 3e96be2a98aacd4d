"""Printing: aligned tables for people, JSON for programs."""

from __future__ import annotations

import json
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
