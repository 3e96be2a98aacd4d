"""Writing batches in a second thread while the caller produces the next one.

An import or a sync spends its time in two places that can run at once: Python reading and checking a batch, and
the database storing the one before (PostgreSQL in its own process, SQLite in C code that releases the GIL). Done in
turn, each waits for the other: a sync then spends a third of its time blocked on PostgreSQL while the next batch
could be checked.

One write in flight at most, so memory holds two batches. The writes run one after another on the caller's
connection (never at the same time as anything else on it), and a failure on either side waits for the write in
flight before it is raised, so the caller's rollback never races a statement.

The producing side stays in the calling thread: it may start worker processes (record checks replay traces), and a
worker's PR_SET_PDEATHSIG fires when the thread that started it ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
_END = object()


def write_behind(batches: Iterable[T], write: Callable[[T], None]) -> None:
    """``write(batch)`` for every batch of ``batches``, each while the next is produced; raises what either raised.
    A single batch is written here, in the calling thread: most writes (a tuning record, a small import) are one."""
    produced = iter(batches)
    first = next(produced, _END)
    if first is _END:
        return
    second = next(produced, _END)
    if second is _END:
        write(first)  # type: ignore[arg-type]
        return
    with ThreadPoolExecutor(1, thread_name_prefix="registry-write") as writer:
        pending: Future = writer.submit(write, first)
        try:
            for batch in itertools.chain([second], produced):
                pending.result()  # the previous write is done (or its error is raised here)
                pending = writer.submit(write, batch)
            pending.result()
        except BaseException:
            if not pending.done():
                pending.exception()  # waits: no statement in flight when the caller rolls back
            raise
