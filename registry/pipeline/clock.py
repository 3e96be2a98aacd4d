"""The wall-time clock of a per-model command: each part of the work adds its seconds to the report's ``Timings``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Literal

from registry.report.model_report import Timings

# The report's parts, one field of ``Timings`` each (``donors`` -> ``Timings.donors_s``).
Part = Literal["import", "donors", "search", "measure", "report", "compile"]


class Clock:
    """Adds wall time to one of the report's parts: ``with clock("donors"): ...``. Every report of the command is
    given the same ``timings``, so each shows the whole command's."""

    def __init__(self, timings: Timings) -> None:
        self.timings = timings

    @contextlib.contextmanager
    def __call__(self, part: Part) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            add_seconds(self.timings, part, time.perf_counter() - start)


def add_seconds(timings: Timings, part: Part, seconds: float) -> None:
    """Add ``seconds`` to ``part``'s field, named here rather than built from the part's name, so that a part without
    a field fails at once."""
    match part:
        case "import":
            timings.import_s += seconds
        case "donors":
            timings.donors_s += seconds
        case "search":
            timings.search_s += seconds
        case "measure":
            timings.measure_s += seconds
        case "report":
            timings.report_s += seconds
        case "compile":
            timings.compile_s += seconds
        case _:
            raise ValueError(f"no part {part!r} in the report's timings")
