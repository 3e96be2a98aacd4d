"""What a row holds, decoded only as far as a registry could have written it.

A shared registry is written by many hands, and a row crafted or corrupted there (by SQL, bypassing every check) is
every reader's problem: a blob that is not zlib, or inflates to gigabytes (1 MB of zlib held 1.4 GB), JSON nested
20,000 deep, decisions that point past their trace (TVM writes each one to the index it names, unchecked, and
segfaulted). Every read goes through here:

- ``inflate`` caps what a blob may inflate to (``MAX_INFLATED``: a workload module is about 25 KB, a trace's
  instructions a few KB) and refuses what is not zlib or UTF-8;
- ``parse`` reads JSON with orjson, which refuses nesting deeper than 1,024 instead of recursing until Python
  gives up;
- ``RecordReader`` hands out stored records whose trace is sound (``registry.store.validation``): one that is not
  is skipped, and one warning per read names the first and counts them (``registry check`` marks such records).

A row that cannot be decoded raises ``CorruptRow`` (one line naming the row) where a reader needs that one row.
"""

from __future__ import annotations

import warnings
import zlib
from typing import Any

import orjson

from registry.errors import RegistryError, RegistryWarning
from registry.store.rows import DeviceSpec
from registry.store.validation import TraceProblem, parse_skeleton, read_decisions, run_secs_problem
from registry.store.values import DeviceRow, StoredRecord

MAX_INFLATED = 16 << 20  # what one blob of a row may inflate to, in bytes


class CorruptRow(RegistryError):
    """A row no registry wrote: it cannot be decoded, or it decodes to what no reader may use."""


def inflate(blob: bytes, what: str) -> str:
    """A zlib blob's text, refused when it is not zlib, not UTF-8, or inflates past MAX_INFLATED."""
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(blob, MAX_INFLATED)
        if inflater.unconsumed_tail or not inflater.eof:
            raise CorruptRow(f"{what} is corrupt: it inflates past {MAX_INFLATED >> 20} MiB or is cut short")
        return data.decode()
    except (zlib.error, UnicodeDecodeError, TypeError) as e:
        raise CorruptRow(f"{what} is corrupt ({type(e).__name__})") from None


def parse(text: str | bytes, what: str) -> Any:
    """JSON text's value; refused when it is not JSON or nests deeper than orjson reads (1,024)."""
    try:
        return orjson.loads(text)
    except (orjson.JSONDecodeError, TypeError) as e:
        raise CorruptRow(f"{what} is corrupt: not JSON ({str(e).split(':')[0]})") from None


def device_spec(row: DeviceRow) -> DeviceSpec:
    """A stored device as the spec it was stored from; CorruptRow for a target that is not JSON."""
    return DeviceSpec(parse(row.target_json, f"device {row.id}'s target"), row.num_threads, row.host_model,
                      row.tvm_version)  # fmt: skip


class Skipped:
    """Rows one read left out: how many, and the first with why; one warning when the read is done. As a context
    manager, a CorruptRow raised inside the block is counted and the block's work left undone."""

    def __init__(self, what: str) -> None:
        self.what, self.count, self.first = what, 0, None

    def add(self, why: str) -> None:
        self.count += 1
        self.first = self.first or why

    def __enter__(self) -> None:
        pass

    def __exit__(self, _kind, error, _tb) -> bool:
        if isinstance(error, CorruptRow):
            self.add(str(error))
            return True
        return False

    def warn(self) -> None:
        if self.count:
            warnings.warn(
                f"{self.count} {self.what} (first: {self.first}); `registry check` marks such records",
                RegistryWarning,
                stacklevel=3,
            )


class RecordReader:
    """Stored records from their rows, their traces checked as far as no workload is needed; see the module
    docstring. Call ``warn`` once the read is done."""

    def __init__(self, skeleton: Any) -> None:
        """``skeleton(skeleton_id)``: that skeleton's compressed instructions (a query)."""
        self._fetch = skeleton
        self._skeletons: dict[int, tuple[str, Any] | CorruptRow] = {}
        self.skipped = Skipped("stored record(s) skipped, not sound")

    def preload(self, rows) -> None:
        """(skeleton id, compressed instructions) rows fetched ahead in one query."""
        for sid, z in rows:
            self._skeletons[sid] = self._decode(sid, z)

    def _decode(self, sid: int, z: bytes) -> tuple[str, Any] | CorruptRow:
        try:
            text = inflate(z, f"trace skeleton {sid}")
            insts = parse(text, f"trace skeleton {sid}")
            return text, parse_skeleton(insts)
        except CorruptRow as e:
            return e
        except TraceProblem as e:
            return CorruptRow(f"trace skeleton {sid} is not a trace's instructions ({e})")

    def record(self, row, keep: bool = False) -> StoredRecord | None:
        """The record of ``(id, workload id, skeleton id, decisions JSON, run_secs JSON, mean_s)``, or None (counted)
        when its trace is not sound or a part of it cannot be decoded; with ``keep``, such a record with its
        ``problem`` and no trace instead."""
        rid, wid, sid, decisions_json, run_secs_json, mean_s = row
        if sid not in self._skeletons:
            self._skeletons[sid] = self._decode(sid, self._fetch(sid))
        skeleton = self._skeletons[sid]
        try:
            if isinstance(skeleton, CorruptRow):
                raise skeleton
            decisions = parse(decisions_json, f"the decisions of record {rid}")
            read_decisions(skeleton[1], decisions)
            run_secs = parse(run_secs_json, f"the latencies of record {rid}")
            problem = run_secs_problem(run_secs)
            if problem:
                raise CorruptRow(f"record {rid}: {problem}")
        except (CorruptRow, TraceProblem) as e:
            why = str(e) if isinstance(e, CorruptRow) else f"record {rid}: {e}"
            self.skipped.add(why)
            return StoredRecord(rid, wid, "", [], mean_s, problem=why) if keep else None
        return StoredRecord(rid, wid, f"[{skeleton[0]},{decisions_json}]", run_secs, mean_s)

    def warn(self) -> None:
        self.skipped.warn()
