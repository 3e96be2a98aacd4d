"""How much of MetaSchedule's own log a run shows: WARNING unless the CLI's -v/-q (or a library user) says otherwise.

The tuning engine sets MetaSchedule's logger to this level when it starts (tune_relax would otherwise reset it).
"""

from __future__ import annotations

import logging

_level = logging.WARNING


def set_meta_schedule_level(level: int) -> None:
    global _level
    _level = level


def meta_schedule_level() -> int:
    return _level
