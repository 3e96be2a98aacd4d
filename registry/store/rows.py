"""Plain values that enter the store. The TVM side fills them; nothing here knows TVM."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

# The origin of records read from a TVM log, which says nothing of where it was measured.
LOG_ORIGIN = "tvm-log"

# MetaSchedule writes this many seconds for a candidate that failed to build or run.
FAILED_RUN_SECS = 1e9

# How a record came to be: measured by a tuning run, by a transfer, or read from a log or bundle.
SOURCES = ("tuned", "transferred", "imported")


def canonical_json(obj: Any) -> str:
    """Compact, key-sorted JSON: equal values give equal text, so its hash identifies a trace."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # integers past 64 bits, which orjson refuses: the same text, the slow way
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def utc(t: dt.datetime) -> dt.datetime:
    """A stored time in UTC. One without a zone is UTC already (SQLite's CURRENT_TIMESTAMP, and what SQLAlchemy reads
    back from SQLite), not whatever zone a PostgreSQL session is set to; SQLite keeps the time without it."""
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def utc_text(t: dt.datetime | None) -> str | None:
    """A stored time as ISO 8601 UTC, to the second; None stays None."""
    return None if t is None else utc(t).isoformat(timespec="seconds")


def shapes_text(args: list[dict[str, Any]]) -> str:
    """A workload's argument shapes as tables show them: ``8x64,64x64,64`` (``scalar`` for a 0-d argument)."""
    return ",".join("x".join(map(str, a["shape"])) or "scalar" for a in args)


def shape_text(shape: tuple[int, ...] | list[int]) -> str:
    """How a shape is stored and matched: "1x3x224x224" (a scalar is "scalar")."""
    return "x".join(str(int(d)) for d in shape) if len(shape) else "scalar"


# Target kinds whose devices are GPUs: their runtime thread count is not part of what they are.
GPU_KINDS = ("cuda", "rocm", "vulkan", "metal", "opencl")
_VENDOR_WORDS = {"nvidia", "amd", "geforce", "tesla", "quadro", "rtx", "radeon", "instinct"}


def gpu_word(model: str) -> str:
    """The distinctive word of a GPU's name: "NVIDIA H100 80GB HBM3" -> "h100"."""
    words = [w for w in re.split(r"[^a-z0-9]+", model.lower()) if w and w not in _VENDOR_WORDS]
    return words[0] if words else "gpu"


@dataclass(frozen=True)
class DeviceSpec:
    """What makes two latencies comparable: target, runtime threads, hardware and TVM release."""

    target: dict[str, Any]
    num_threads: int
    host_model: str
    tvm_version: str

    @classmethod
    def of(cls, target: dict[str, Any], threads: int, host_model: str, tvm_version: str) -> DeviceSpec:
        """The device of records measured for ``target`` with ``threads`` runtime threads: a GPU's latency does not
        depend on the host runtime's thread count, so it is no part of a GPU device's identity (0)."""
        gpu = target.get("kind") in GPU_KINDS
        return cls(target=target, num_threads=0 if gpu else threads, host_model=host_model, tvm_version=tvm_version)

    @functools.cached_property
    def target_json(self) -> str:
        return canonical_json(self.target)

    @functools.cached_property
    def key(self) -> str:
        ident = canonical_json([self.target, self.num_threads, self.host_model, self.tvm_version])
        return hashlib.sha256(ident.encode()).hexdigest()

    @property
    def kind(self) -> str:
        return str(self.target.get("kind", "unknown"))

    @property
    def mcpu(self) -> str | None:
        return self.target.get("mcpu") or self.target.get("arch") or None

    @property
    def num_cores(self) -> int | None:
        cores = self.target.get("num-cores")
        return int(cores) if cores is not None else None

    @property
    def is_gpu(self) -> bool:
        return self.kind in GPU_KINDS

    @property
    def name(self) -> str:
        """A short readable label, e.g. "llvm-znver5-2c-1t" or "cuda-sm_90-h100". Not unique on its own: the key is.
        A GPU's has no thread count (it means nothing there) but a word of the GPU's name."""
        if self.is_gpu:
            return f"{self.kind}-{self.mcpu or 'generic'}-{gpu_word(self.host_model)}"
        cores = f"-{self.num_cores}c" if self.num_cores is not None else ""
        return f"{self.kind}-{self.mcpu or 'generic'}{cores}-{self.num_threads}t"


@dataclass(frozen=True)
class Signature:
    """A workload's readable operator signature."""

    op_kind: str
    task_name: str
    iter_kinds: str  # one letter per anchor loop: S spatial, R reduce, O other
    extents: tuple[int, ...]
    args: tuple[tuple[tuple[int, ...], str], ...]  # (shape, dtype) per buffer argument
    flops: float


@dataclass(frozen=True)
class WorkloadIn:
    shash: str
    mod_json: str  # the IRModule's JSON graph, as in the second field of Workload.as_json() once base64-decoded
    args_info: list[Any]  # ArgInfo JSON list, as every tuning record of this workload carries it
    signature: Signature
    tvm_version: str
    module_equality: str = "structural"

    @property
    def ident(self) -> tuple[str, str]:
        return (self.shash, self.module_equality)


@dataclass(slots=True)  # not frozen: a frozen dataclass takes twice as long to build, and a sync builds 10^6
class RecordIn:
    """One measured schedule. ``workload`` is the (shash, module_equality) of a workload in the same batch or store.
    Not changed after it is made (``dataclasses.replace`` makes another)."""

    workload: tuple[str, str]
    device: DeviceSpec
    trace: Any  # the trace JSON, [instructions, decisions], as the first field of TuningRecord.as_json()
    run_secs: tuple[float, ...]
    source: str
    tool_version: str
    donor_record_id: int | None = None
    team: str | None = None
    model: str | None = None
    host: str | None = None
    # The canonical JSON of trace[0], when the caller already has it (import checks each trace's instructions).
    insts_json: str = field(default="", compare=False)
    # Where it was measured: None for this registry (its id is filled in on write), LOG_ORIGIN for a TVM log, another
    # registry's id for a record that came by bundle or sync.
    origin: str | None = None
    # None: from the source ("imported" for an imported record, else "measured").
    trust: str | None = None
    # When it was measured, for a record that travelled (None: now).
    created_at: dt.datetime | None = None

    @property
    def trust_level(self) -> str:
        return self.trust or ("imported" if self.source == "imported" else "measured")

    def __post_init__(self) -> None:
        # Computed once, as plain attributes: functools.cached_property takes a lock on first use (Python 3.11),
        # which cost a sync of 10^6 records about 5% of its time.
        # Odd latencies (not numbers, not a list) make a record that is not ok, not an exception: the checks that
        # follow say what is wrong with it.
        secs = self.run_secs
        try:
            ok = bool(secs) and all(math.isfinite(s) and 0 <= s < FAILED_RUN_SECS for s in secs)
            mean = sum(secs) / len(secs) if ok else None
        except (TypeError, ValueError, OverflowError):
            ok, mean = False, None
        self.ok, self.mean_s = ok, mean

    ok: bool = field(init=False, compare=False, repr=False)
    mean_s: float | None = field(init=False, compare=False, repr=False)


@dataclass
class IngestResult:
    workloads_new: int = 0
    workloads_present: int = 0
    records_new: int = 0
    records_present: int = 0
    records_skipped: int = 0  # invalid records left out (``registry import --skip-invalid``)
    first_skipped: str | None = None  # "where, why" of the first of them


@dataclass
class IngestExtras:
    """What a bundle or a sync writes besides records, in the same transaction (``Store.ingest_batches``).

    Workloads are named by the sender's (shash, module_equality); ``local`` maps them to this registry's, whose
    hashes were recomputed here. ``donors`` may be filled while the batches are read: it is used after the last."""

    local: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    # (name, file sha256, input shapes, [(sender's workload, task name, weight)])
    models: list[tuple[str, str, dict[str, list[int]], list[tuple[tuple[str, str], str, int]]]] = field(
        default_factory=list
    )
    # (a transferred record, its donor as (sender's workload, device key, trace hash, origin))
    donors: list[tuple[RecordIn, tuple[tuple[str, str], str, str, str]]] = field(default_factory=list)
    # (source registry id, filters key, highest source record id read): how far a sync got
    sync_mark: tuple[str, str, int] | None = None
    # the sender's effort per (its workload, device key): (trials, seconds, curve, plateau), kept where it says more
    # trials than this registry's (registry.store.sql.efforts.merge)
    efforts: list[tuple[tuple[str, str], str, int, float, tuple, bool]] = field(default_factory=list)


@dataclass(frozen=True)
class ModelIn:
    """A model to store: its name, file sha256 and input shapes, and its tasks as (workload, task name, weight);
    ``plain``: its kernels as plain TVM extracts them, where they differ from ``tasks`` (``values.PlainTaskRow``)."""

    name: str
    sha256: str
    input_shapes: dict[str, list[int]]
    tasks: Sequence[tuple[WorkloadIn, str, int]]
    plain: Sequence[tuple[WorkloadIn, str, int]] = ()
