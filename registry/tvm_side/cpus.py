"""The CPUs this process may run on, as they were before TVM's runtime pinned it.

The first use of TVM's runtime thread pool in a process (even ``runtime.NumThreads()``, or running a compiled model)
pins the calling thread to CPU 0, and every process spawned afterwards inherits that single core: on a 2-core
machine both builders would share one core and MetaSchedule's 30 s build timeout fail every candidate. So the set is
read once, when this module loads, and ``registry.tvm_side`` loads it before any of its modules imports TVM. Everything
that counts cores or gives them back asks here.
"""

from __future__ import annotations

import os

_BEFORE_TVM = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


def usable() -> list[int]:
    """The CPUs this process may run on (all of this machine's where the platform does not say)."""
    return sorted(_BEFORE_TVM) or list(range(os.cpu_count() or 1))


def count() -> int:
    return len(usable())


def unpin() -> None:
    """Give this thread back the CPUs it had before TVM's runtime pinned it."""
    if _BEFORE_TVM and set(os.sched_getaffinity(0)) != _BEFORE_TVM:
        os.sched_setaffinity(0, _BEFORE_TVM)
