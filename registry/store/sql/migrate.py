"""Alembic, configured at run time from the installed package, so that a wheel migrates without the source tree."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

import registry.store.migrations


def alembic_config(engine: Engine | None = None) -> Config:
    cfg = Config()
    # '%' is Alembic's interpolation character; a path containing it must be escaped.
    cfg.set_main_option("script_location", str(Path(registry.store.migrations.__file__).parent).replace("%", "%%"))
    if engine is not None:
        cfg.attributes["engine"] = engine
    return cfg


def known_revisions() -> set[str]:
    return {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def script_head() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def run_upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(alembic_config(engine), revision)
