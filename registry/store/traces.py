"""The key a record's trace is stored under (``TuningRecord.trace_hash``), from the trace's canonical JSON. Pure
hashing, without SQLAlchemy or TVM: the tuning engine keys the traces it has tried by it before any write.
"""

from __future__ import annotations

import hashlib
from typing import Any

from registry.store.rows import canonical_json


def trace_hash(trace_text: str) -> str:
    """128 bits of sha256, in hex (see TuningRecord.trace_hash)."""
    return hashlib.sha256(trace_text.encode()).hexdigest()[:32]


def whole_trace_hash(insts_json: str, decisions_json: str) -> str:
    """The ``trace_hash`` a record is stored under, from the canonical JSON of its instructions and decisions: the
    hash of the whole trace's canonical JSON, ``[instructions, decisions]``."""
    return trace_hash(f"[{insts_json},{decisions_json}]")


def record_trace_hash(trace: Any) -> str:
    """The ``trace_hash`` a record of this trace JSON is stored under."""
    return whole_trace_hash(canonical_json(trace[0]), canonical_json(trace[1]))
