"""Work-arounds for TVM 0.27 behaviour that bites a long-lived process."""

from __future__ import annotations

import logging

META_SCHEDULE_LOGGER = "tvm.s_tir.meta_schedule"


def prepare_tuning_logging() -> None:
    """Call before each ``tune_relax``.

    tune_relax rebuilds its logging config from the *names* of the handlers already on its logger. A handler without
    a name there (a host application's, such as pytest's log capture) makes the second tune_relax of a process fail
    with ``AttributeError: 'NoneType' object has no attribute 'format'``. Unnamed handlers are dropped first.
    """
    logger = logging.getLogger(META_SCHEDULE_LOGGER)
    for handler in list(logger.handlers):
        if handler.get_name() is None:
            logger.removeHandler(handler)
