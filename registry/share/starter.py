"""Bundles shipped with the package: ``registry pull starter`` gives a new registry donors on its first transfer.

A shipped bundle is an ordinary bundle file (``registry/share/bundle.py``) under ``registry/share/bundles/``; pulling
one is ``registry import`` of it, with every check that implies. What the starter bundle holds and how it was built
is in docs/SHARING.md ("The starter bundle"); ``bench/corpus/starter.py`` rebuilds it.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from registry.errors import BadInputError

SUFFIX = ".bundle"


@dataclass
class Shipped:
    name: str
    path: Path
    records: int
    workloads: int
    models: int
    created_at: str
    bytes: int


def _folder() -> Path:
    return Path(str(resources.files("registry.share") / "bundles"))


def shipped() -> list[Shipped]:
    """The bundles this installation ships, by name."""
    out = []
    for path in sorted(_folder().glob(f"*{SUFFIX}")):
        try:
            with zipfile.ZipFile(path) as zf:
                manifest = json.loads(zf.read("manifest.json"))
            counts = manifest["counts"]
            out.append(Shipped(path.name[: -len(SUFFIX)], path, int(counts["records"]), int(counts["workloads"]),
                               int(counts["models"]), str(manifest["created_at"]), path.stat().st_size))  # fmt: skip
        except (OSError, KeyError, ValueError, zipfile.BadZipFile):
            continue  # a damaged file is not offered; importing it by path says what is wrong
    return out


def shipped_bundle(name: str) -> Path:
    for s in shipped():
        if s.name == name:
            return s.path
    known = ", ".join(s.name for s in shipped()) or "none in this installation"
    raise BadInputError(f"no shipped bundle {name!r} (shipped: {known}); `registry pull --list` lists them")
