"""Everything that imports TVM. Nothing outside this package (and the CLI commands that need it) may.

The CPU affinity is captured here, before TVM loads: TVM's runtime pins the calling thread to one core the first time
its thread pool starts, and every process spawned afterwards (builders, runners) would inherit that single core.
See ``registry.tvm_side.compat.unpin``.
"""

from __future__ import annotations

import os

ORIGINAL_AFFINITY = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
