"""Work-arounds for TVM 0.27 behaviour that bites a long-lived process."""

from __future__ import annotations

import logging
import os

from registry.tvm_side import ORIGINAL_AFFINITY

META_SCHEDULE_LOGGER = "tvm.s_tir.meta_schedule"


def unpin() -> None:
    """Give this thread back the CPUs it had before TVM's runtime pinned it.

    The first use of TVM's runtime thread pool in a process (even ``runtime.NumThreads()``, or running a compiled
    model) pins the calling thread to CPU 0. Builder and runner workers started later inherit that mask: on a 2-core
    machine both builders then share one core and MetaSchedule's 30 s build timeout fails every candidate.
    """
    if ORIGINAL_AFFINITY and set(os.sched_getaffinity(0)) != ORIGINAL_AFFINITY:
        os.sched_setaffinity(0, ORIGINAL_AFFINITY)


def prepare_tuning() -> None:
    """Call before each ``tune_relax``: undo the pinning above, and drop unnamed handlers from MetaSchedule's logger.

    tune_relax rebuilds its logging config from the *names* of the handlers already on its logger. A handler without
    a name there (a host application's, such as pytest's log capture) makes the second tune_relax of a process fail
    with ``AttributeError: 'NoneType' object has no attribute 'format'``.
    """
    unpin()
    logger = logging.getLogger(META_SCHEDULE_LOGGER)
    for handler in list(logger.handlers):
        if handler.get_name() is None:
            logger.removeHandler(handler)
