"""The options of ``registry tune``, ``registry transfer`` and ``registry serve``, each default written once.

The command line (``registry.cli``), the Python API (``registry.api``) and the pipeline's own settings
(``registry.pipeline``) take their defaults from these classes, and ``tests/test_options.py`` checks that they agree.
The classes check their values as the CLI's option types do, so the API refuses what the command line refuses.
A helper every layer may use: it imports nothing of the registry but ``registry.errors``, and neither TVM nor
SQLAlchemy, so a light command may read it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from registry.errors import BadInputError


# The Python API's checks of what the CLI's option types check (click.IntRange, FiniteRange, Duration): an option
# of the wrong type or out of range is one BadInputError before any work, and NumPy scalars become Python numbers
# (a report that holds them cannot be written as JSON).
def whole(field: str, value: Any, least: int, *, optional: bool = False) -> int | None:
    """``value`` as an int of at least ``least`` (None where ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise BadInputError(f"{field}: {value!r} is not a whole number of at least {least}")
    return int(value)


def real(
    field: str, value: Any, least: float, most: float | None = None, *, above: bool = False, optional: bool = False
) -> float | None:
    """``value`` as a finite float from ``least`` (excluded where ``above``) to ``most`` (None where ``optional``)."""
    if value is None and optional:
        return None
    number = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not (number and (value > least if above else value >= least) and (most is None or value <= most)):
        bound = f"above {least:g}" if above else f"of at least {least:g}"
        raise BadInputError(
            f"{field}: {value!r} is not a number {bound}" + (f" and at most {most:g}" if most is not None else "")
        )
    return float(value)


def flag(field: str, value: Any) -> bool:
    """``value`` if it is True or False (None, "no" or 0 would read as a choice no one made)."""
    if not isinstance(value, bool):
        raise BadInputError(f"{field}: {value!r} is not True or False")
    return value


def device_selector(field: str, value: Any) -> str:
    """A device as the CLI's ``--device`` names it: ``"host"``, an id (an int too) or a name."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise BadInputError(f"{field} {value!r}: expected an id or a name")
    return value


def _checked(options: Any, **values: Any) -> None:
    """Sets a frozen dataclass's fields to their checked values."""
    for name, value in values.items():
        object.__setattr__(options, name, value)


# The trial budget of `registry tune` given neither --trials nor --budget: this many measured trials per task.
TRIALS_PER_TASK = 32


@dataclass(frozen=True)
class TuneOptions:
    """``registry tune``'s options and ``registry.tune_models()``'s keywords, in their units (percent for the
    ``min_*`` ones, as a user writes them)."""

    trials: int | None = None  # measured trials for the models, stored ones counted (None: TRIALS_PER_TASK a task)
    seconds: float | None = None  # wall time of the whole command (None: no limit)
    predictor: bool = True  # rank candidates with the device's stored predictor from the first trial
    keep: float = 0.75  # share of each batch measured; the predicted-worst rest is dropped unmeasured
    min_gain: float = 1.0  # percent of the model's latency a task must gain a minute, or it stops
    min_share: float = 1.0  # percent of the model's latency below which a task is paused: it cannot move the total
    floor: int = 0  # measured trials every live task gets before any task gets more (0: no floor)
    batch: int = 16  # candidates proposed per batch
    plateau: int = 64  # trials: a task whose last ones improved its best by under 1% has plateaued
    retune: bool = False  # tune plateaued tasks too
    # Seconds a task stays leased to a run after its last batch: the time a killed run's tasks wait before another
    # run takes them over.
    lease: float = 300.0

    def __post_init__(self) -> None:
        _checked(
            self,
            trials=whole("trials", self.trials, 1, optional=True),
            seconds=real("seconds", self.seconds, 0, above=True, optional=True),
            predictor=flag("predictor", self.predictor),
            keep=real("keep", self.keep, 0.05, 1.0),
            min_gain=real("min_gain", self.min_gain, 0),
            min_share=real("min_share", self.min_share, 0, 100),
            floor=whole("floor", self.floor, 0),
            batch=whole("batch", self.batch, 1),
            plateau=whole("plateau", self.plateau, 1),
            retune=flag("retune", self.retune),
            lease=real("lease", self.lease, 0, above=True),
        )


# Donor schedules per task that a transfer measures: 3 kept nearly all of 8's speedup at 40% of the search time
# (docs/BENCHMARKS.md, "Transfer-tuning").
MEASURED_CANDIDATES = 3
# ... that the predictor ranks when nothing is measured (--no-measure): only its pick is built, so a wider pool costs
# replays and features, not builds. 32 picked faster schedules than 3 or 12 within the compile-only floor's wall
# time; 64 picked worse and passed the floor (docs/BENCHMARKS.md, "A predictor that ranks").
RANKED_CANDIDATES = 32


@dataclass(frozen=True)
class TransferOptions:
    """``registry transfer``'s options and ``registry.transfer()``'s keywords."""

    candidates: int | None = None  # donor schedules per task, at most (None: ``per_task``'s default for the mode)
    neighbours: int = 5  # donor workloads considered per task
    tune_trials: int = 32  # measured trials for each task no donor helped, and each poor transfer (0: none)
    # Seconds of wall time for the whole command, the fallback tuning taking what the transfers leave (None: no
    # limit; 0: no tuning). Three minutes reached the latency five did on a detector's first transfer
    # (docs/BENCHMARKS.md, "A new user's first transfer").
    tune_budget: float | None = 180.0
    retune_below: float = 0.5  # a transfer under this share of its donors' best FLOP rate is tuned too (0: never)
    # Which pipeline runs: True, ``registry.pipeline.transfer`` (donors measured on this machine, records written);
    # False (``--no-measure``), ``registry.pipeline.predicted`` (nothing timed, the device's predictor picks each
    # task's donor schedule, no record written), for a device this machine need not be.
    measure: bool = True
    device: str | None = None  # with measure=False: the registry device to compile for (None: this machine's)

    def __post_init__(self) -> None:
        _checked(
            self,
            device=None if self.device is None else device_selector("device", self.device),
            candidates=whole("candidates", self.candidates, 1, optional=True),
            neighbours=whole("neighbours", self.neighbours, 1),
            tune_trials=whole("tune_trials", self.tune_trials, 0),
            tune_budget=real("tune_budget", self.tune_budget, 0, optional=True),
            retune_below=real("retune_below", self.retune_below, 0, 1),
            measure=flag("measure", self.measure),
        )
        if self.measure and self.device is not None:
            raise BadInputError("device= applies with measure=False: a measured transfer measures on this machine")

    @property
    def per_task(self) -> int:
        """The donor schedules this transfer takes per task, at most: ``candidates``, else its mode's default."""
        if self.candidates is not None:
            return self.candidates
        return MEASURED_CANDIDATES if self.measure else RANKED_CANDIDATES


@dataclass(frozen=True)
class ServeOptions:
    """``registry serve``'s options: where it listens, and the bounds it sets on requests (``registry.server``)."""

    host: str = "127.0.0.1"  # this machine only: beyond it, a TLS reverse proxy serves it (docs/SERVER.md)
    port: int = 8000
    public: bool = False  # requests without a token may read
    workers: int = 1  # server processes
    max_upload: int = 256 * 10**6  # bytes of one pushed bundle: 256MB
    rate_limit: float = 50.0  # requests a second per client address (bursts of 4x that); 0: no limit
    max_header: int = 32 * 2**10  # bytes of a request's header block: 32KiB, nginx's default too


TUNE = TuneOptions()
TRANSFER = TransferOptions()
SERVE = ServeOptions()


def duration_text(seconds: float) -> str:
    """``seconds`` as a command line writes a duration: ``5m``, ``1h30m``, ``90s`` -> ``1m30s``."""
    hours, rest = divmod(round(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
    return text or "0"


def size_text(size: int) -> str:
    """``size`` bytes as a command line writes a size: in the largest unit that divides it (``256MB``, ``32KiB``)."""
    units = (("GiB", 2**30), ("GB", 10**9), ("MiB", 2**20), ("MB", 10**6), ("KiB", 2**10), ("KB", 10**3))
    for unit, scale in units:
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


__all__ = ["SERVE", "TRANSFER", "TUNE", "ServeOptions", "TransferOptions", "TuneOptions", "duration_text", "size_text"]
