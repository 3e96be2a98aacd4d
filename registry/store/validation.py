"""What can be checked about a tuning record without TVM: its latencies, the shape of its trace, and every decision
against the instruction it belongs to.

A MetaSchedule trace is ``[instructions, decisions]``: an instruction is ``[kind, inputs, attrs, outputs]`` and a
decision is ``[instruction index, value]``. Only the sampling instructions take one, and TVM trusts what it is given:

- ``Trace::ApplyJSONToSchedule`` writes each decision to ``decisions[index]`` of a vector sized by the instruction
  count without a bounds check, so ``[100001, 0]`` writes past its end (a crash, sometimes, or worse);
- ``SamplePerfectTile`` computes ``extent % factor``: a zero factor divides by zero;
- ``SampleCategorical`` casts its decision to 32 bits before its range check, so 2^32 passes as 0.

Everything here is pure Python and never raises on odd input: a record that is not what MetaSchedule writes gets a
reason. What needs the workload (do the instructions apply to it, do tile sizes multiply to its loop extents) is
``registry.records.validator``'s job, which uses the facts this module parses.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from registry.store.rows import FAILED_RUN_SECS, LOG_ORIGIN, RecordIn, canonical_json

# MetaSchedule's stand-ins for a run that failed to build or run: this registry and TVM's validate_database write
# 1e9, TVM's AddToDatabase callback writes 1e10 (kMaxMeanTime). Such a record is kept, as a failed one.
FAILED_STAND_INS = (FAILED_RUN_SECS, 1e10)
# No kernel worth tuning runs for an hour; a latency above it is a corrupt or forged value, not a measurement.
MAX_RUN_SECS = 3600.0
# Nor for under a nanosecond: a call through TVM's packed-function interface alone takes several (a one-element add
# takes tens of ns: docs/BENCHMARKS.md, "Evidence behind the code's rules"), a GPU launch microseconds. A forged 1 ps
# would be any workload's best record.
MIN_RUN_SECS = 1e-9
# FLOP/s no device reaches, by the narrowest element type (bits) a workload's buffers hold: a few times the fastest
# accelerators' dense peaks of 2025 (NVIDIA B300: about 15 PFLOP/s at 4 bits, 5 at 8, 2.5 at 16, 1.2 at 32 as TF32;
# AMD MI300X: 0.16 at 64). A record that claims more for its workload's FLOPs measured nothing.
MAX_FLOP_RATES = ((8, 50e15), (16, 10e15), (32, 5e15), (64, 1e15))
MAX_RUNS = 1000  # MetaSchedule's evaluator repeats a handful of times; thousands of samples is not a log line
MAX_INSTS = 10_000  # real traces have tens to a few hundred instructions
MAX_INT = 2**31 - 1  # TVM keeps decisions and loop extents in 32 bits in places
MAX_NAME = 200  # characters of a team, model, host or task name: a label, not a document
MAX_WEIGHT = MAX_INT  # how often a task runs in its model: an INTEGER column on both dialects
# A record measured later than this after now is a forged or broken clock's: a day covers time zones and clock skew.
FUTURE_SLACK = dt.timedelta(days=1)
# Nor was anything measured with TVM before its repository began (2016): an earlier time is forged or a broken clock's.
MEASURED_SINCE = dt.datetime(2016, 1, 1, tzinfo=dt.timezone.utc)
# A registry's id is uuid4().hex (migration 0003 writes it); a model's, the sha256 of its file (or, for a Relax
# module, of its structural hash and shapes): lowercase hex either way.
REGISTRY_ID = re.compile(r"[0-9a-f]{32}")
# A record id is an autoincrement from 1 in a BIGINT (PostgreSQL's holds 2^63 - 1): a sender's id, or a sync mark,
# beyond this is no record's.
MAX_RECORD_ID = 2**62
SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_SHAPES_JSON = 1000  # characters of a model's input shapes as JSON: the model table's column

TILE, PARTITIONED_TILE = "SamplePerfectTile", "SamplePartitionedTile"
CATEGORICAL, LOCATION = "SampleCategorical", "SampleComputeLocation"
POSTPROC = "EnterPostproc"
BIND, GPU_THREADS = "Bind", ("blockIdx.", "threadIdx.", "vthread")


class TraceProblem(ValueError):
    """A trace that is not what MetaSchedule writes; the message says what is wrong."""


@dataclass(frozen=True)
class Problem:
    """Why a record is refused. ``trace``: its trace does not apply to its workload (else a value is wrong)."""

    reason: str
    trace: bool = True


class Refusals:
    """The refused records of one write: how many, and the first, for a one-line error or report."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None
        self._kinds: set[bool] = set()

    def add(self, where: str, problem: Problem) -> None:
        self.count += 1
        self._kinds.add(problem.trace)
        if self.first is None:
            self.first = f"{where}, {problem.reason}"

    def message(self, total: int) -> str:
        """E.g. "3 of 120 records do not apply to their workload (first: log.json:7, <reason>)"."""
        what = {frozenset([True]): "do not apply to their workload", frozenset([False]): "are invalid"}.get(
            frozenset(self._kinds), "are invalid or do not apply to their workload"
        )
        return f"{self.count} of {total} records {what} (first: {self.first})"


def name_problem(value: Any, what: str) -> str | None:
    """None for a name fit to store and print (a team, model, host or task name: printable text, no control or
    format characters, at most MAX_NAME long; None itself is no name); else what is wrong. A newline or an ANSI
    escape in a name forges lines in every table and log that prints it."""
    if value is None or (type(value) is str and 0 < len(value) <= MAX_NAME and value.isprintable()):
        return None
    if not isinstance(value, str):
        return f"{what} {_short(value)} is not text"
    if not value.strip():
        return f"{what} is empty"
    if len(value) > MAX_NAME:
        return f"{what} is {len(value)} characters long, more than {MAX_NAME}"
    return f"{what} {value!r} holds a control character"


def weight_problem(value: Any) -> str | None:
    """None for a task weight (how often the task runs in its model: a whole number from 1 to MAX_WEIGHT)."""
    if _is_int(value) and 1 <= value <= MAX_WEIGHT:
        return None
    return f"task weight {_short(value)} is not a whole number from 1 to {MAX_WEIGHT}"


MAX_CURVE = 1024  # points of an effort's curve (a run keeps at most 256)
# A trial builds a candidate (an LLVM compile, tens of milliseconds of a core) and runs it (a warm-up and repeats):
# even a machine of hundreds of cores building and measuring at once does not measure a thousand a second. An effort
# claiming more trials than its seconds allow at that rate did not measure them.
MIN_TRIAL_S = 1e-3
# No kernel call returns in under a nanosecond (a call and its return alone take a few cycles): a best below it is
# not a measurement.
MIN_EFFORT_US = 1e-3
MAX_EFFORT_S = 1e9
# A tuning run's lease on a task must outlive one batch of it (the run renews its leases after every batch and while
# it waits), and batches take seconds to minutes; a killed run's tasks wait for its leases to expire. A day covers any
# batch and bounds that wait: `registry tune --lease` refuses more, and a stored lease past it counts as expired.
MAX_LEASE_S = 24 * 3600.0
# The writers' clocks may differ by this much: a lease is past MAX_LEASE_S only beyond it.
CLOCK_SLACK_S = 600.0


def effort_problem(trials: Any, seconds: Any, curve: Any, plateau: Any) -> str | None:
    """None for a task's effort as a registry may hold it: counts, finite seconds of at least ``MIN_TRIAL_S`` per
    trial, and a curve of (trials, best µs) whose trials rise to at most the total and whose best never rises nor
    falls below ``MIN_EFFORT_US``. Checked where an effort arrives from another registry and where one is read."""
    if not (_is_int(trials) and 0 <= trials <= MAX_WEIGHT):
        return f"effort trials {_short(trials)} is not a whole number from 0 to {MAX_WEIGHT}"
    if not (_is_number(seconds) and 0 <= seconds < MAX_EFFORT_S):
        return f"effort seconds {_short(seconds)} is not a number from 0 to {MAX_EFFORT_S:g}"
    if seconds < trials * MIN_TRIAL_S:
        return f"{trials} trials in {seconds:g} s is faster than a trial can be measured ({MIN_TRIAL_S:g} s each)"
    if not isinstance(plateau, bool):
        return f"effort plateau {_short(plateau)} is not true or false"
    return curve_problem(curve, trials)


def curve_problem(curve: Any, trials: int) -> str | None:
    """None for an effort's curve: at most ``MAX_CURVE`` points (trials, best µs) whose trials rise to at most
    ``trials`` and whose best never rises nor falls below ``MIN_EFFORT_US``."""
    if not isinstance(curve, (list, tuple)) or len(curve) > MAX_CURVE:
        return f"an effort curve is a list of at most {MAX_CURVE} points"
    last_n, last_us = 0, math.inf
    for point in curve:
        if not (isinstance(point, (list, tuple)) and len(point) == 2):
            return f"effort curve point {_short(point)} is not a pair (trials, µs)"
        n, us = point
        if not (_is_int(n) and 0 <= n <= trials) or not (_is_number(us) and MIN_EFFORT_US <= us < 1e12):
            return (
                f"effort curve point ({_short(n)}, {_short(us)}) is not (trials up to the effort's {trials}, "
                f"µs from {MIN_EFFORT_US:g})"
            )
        if n < last_n or us > last_us:
            return f"effort curve point ({n}, {us:g}) follows ({last_n}, {last_us:g}): trials only rise, a best never"
        last_n, last_us = n, us
    return None


def measured_at_problem(at: dt.datetime | None) -> str | None:
    """None for a time a record may have been measured at: from MEASURED_SINCE to a day from now."""
    if at is None:
        return None
    at = at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)
    if at > dt.datetime.now(dt.timezone.utc) + FUTURE_SLACK:
        return f"it was measured at {at.isoformat()}, in the future"
    if at < MEASURED_SINCE:
        return f"it was measured at {at.isoformat()}, before TVM existed"
    return None


def origin_problem(value: Any) -> str | None:
    """None for where a record that travelled says it was measured: a registry's id, or LOG_ORIGIN."""
    if type(value) is str and _is_origin(value):
        return None
    if value is None or value == "":
        return "it does not name the registry that measured it (no origin)"
    return f"its origin {_short(value)} is neither a registry id (32 hex digits) nor {LOG_ORIGIN!r}"


@functools.lru_cache(maxsize=256)  # asked for every record of an import or a sync, which name a few origins
def _is_origin(value: str) -> bool:
    return value == LOG_ORIGIN or REGISTRY_ID.fullmatch(value) is not None


def model_problem(sha256: Any, input_shapes: Any) -> str | None:
    """None for a model as a registry records one: its sha256 (SHA256), and its input shapes, a mapping of input
    names to whole dimensions (a Relax module may have a 0) that fits the model table."""
    if type(sha256) is not str or not SHA256.fullmatch(sha256):
        return f"sha256 {_short(sha256)} is not 64 lowercase hex digits"
    if not isinstance(input_shapes, dict):
        return f"input shapes {_short(input_shapes)} are not a mapping of input names to shapes"
    for name, dims in input_shapes.items():
        problem = name_problem(name, "input name")
        if problem:
            return problem
        if not (type(dims) is list and all(_is_int(d) and 0 <= d <= MAX_INT for d in dims)):
            return f"input {name!r} has the shape {_short(dims)}, not a list of whole dimensions"
    if len(canonical_json(input_shapes)) > MAX_SHAPES_JSON:
        return f"its input shapes take more than {MAX_SHAPES_JSON} characters"
    return None


def max_flop_rate(bits: int) -> float:
    """The FLOP/s no device reaches on elements of ``bits`` (MAX_FLOP_RATES; 0, not known, gets the highest)."""
    for width, rate in MAX_FLOP_RATES:
        if bits <= width:
            return rate
    return MAX_FLOP_RATES[-1][1]


def rate_problem(run_secs: Sequence[float], flops: float, bits: int) -> str | None:
    """None for measured latencies of a workload of ``flops`` on elements of ``bits`` that some device could reach
    (a failed run's stand-in always can)."""
    fastest, rate = min(run_secs, default=math.inf), max_flop_rate(bits)
    if fastest * rate >= flops:
        return None
    return (
        f"latency {fastest:.3g} s would run its {flops:.3g} FLOPs at {flops / fastest / 1e15:.3g} PFLOP/s, beyond "
        f"any device's {rate / 1e15:g} PFLOP/s at {bits or 'any'} bits"
    )


def run_secs_problem(run_secs: Any) -> str | None:
    """None for measured latencies (each from MIN_RUN_SECS to MAX_RUN_SECS) or TVM's failed-run stand-in (an empty
    list counts as failed too: TVM writes null when nothing was measured); else what is wrong."""
    if type(run_secs) in (list, tuple) and 0 < len(run_secs) <= MAX_RUNS:
        # The common case, in one pass (every record of an import or a sync comes here): floats from MIN_RUN_SECS
        # to MAX_RUN_SECS (NaN fails the comparison). Anything else takes the full checks below.
        for s in run_secs:
            if type(s) is not float or not MIN_RUN_SECS <= s <= MAX_RUN_SECS:
                break
        else:
            return None
    if not isinstance(run_secs, (list, tuple)):
        return f"run_secs {_short(run_secs)} is not a list of latencies"
    if len(run_secs) > MAX_RUNS:
        return f"{len(run_secs)} latencies, more than {MAX_RUNS}"
    for s in run_secs:
        if not _is_number(s):
            return f"run_secs holds {_short(s)}, not a number"
    if all(s in FAILED_STAND_INS for s in run_secs):
        return None
    for s in run_secs:
        if not (math.isfinite(s) and MIN_RUN_SECS <= s <= MAX_RUN_SECS):
            return (
                f"latency {s!r} s is not a measurement (expected from {MIN_RUN_SECS:g} to {MAX_RUN_SECS:g} s, or "
                f"{FAILED_RUN_SECS:g} for a failed run)"
            )
    return None


# -- instructions ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampler:
    """A sampling instruction and what bounds its decision."""

    kind: str
    n: int = 0  # tile factors (SamplePerfectTile, SamplePartitionedTile)
    candidates: int = 0  # SampleCategorical
    partition: tuple[int, int] = (0, 1)  # SamplePartitionedTile's (partition_pos, innerpart_factor)
    # An attribute, not a property: it is asked for every decision of every record a sync or an import reads.
    is_tile: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_tile", self.kind in (TILE, PARTITIONED_TILE))


@dataclass(frozen=True)
class Skeleton:
    """A trace's instruction list, as far as decisions are concerned."""

    n_insts: int
    samplers: dict[int, Sampler]  # by instruction index
    prefix: int  # instructions before EnterPostproc: all sampling happens there
    # Whether it binds loops to GPU threads: every GPU schedule does (a GPU runs nothing unbound), no CPU one does
    binds_threads: bool = False
    # (instruction index, decision) -> what is wrong with it: the records of one design space repeat few values per
    # instruction, and a registry's import or sync checks millions of decisions
    verdicts: dict = field(default_factory=dict, compare=False, repr=False)

    @functools.cached_property
    def locations(self) -> tuple[int, ...]:
        """The SampleComputeLocation indices: their decisions change loop structure, not only loop sizes."""
        return tuple(i for i, s in self.samplers.items() if s.kind == LOCATION)


def parse_skeleton(insts: Any) -> Skeleton:
    """Raises TraceProblem for an instruction list MetaSchedule would not write."""
    if not isinstance(insts, list) or not insts:
        raise TraceProblem("its instructions are not a non-empty list")
    if len(insts) > MAX_INSTS:
        raise TraceProblem(f"{len(insts)} instructions, more than {MAX_INSTS}")
    samplers: dict[int, Sampler] = {}
    prefix = len(insts)
    binds_threads = False
    for i, inst in enumerate(insts):
        if not (isinstance(inst, list) and len(inst) == 4 and isinstance(inst[0], str)):
            raise TraceProblem(f"instruction {i} is not [kind, inputs, attrs, outputs]")
        kind, inputs, attrs, outputs = inst
        if not (isinstance(inputs, list) and isinstance(attrs, list) and isinstance(outputs, list)):
            raise TraceProblem(f"instruction {i} ({kind}) is not [kind, inputs, attrs, outputs]")
        if not all(isinstance(o, str) for o in outputs):
            raise TraceProblem(f"instruction {i} ({kind}) names its outputs with non-strings")
        if kind == POSTPROC and prefix == len(insts):
            prefix = i
        elif kind == BIND and attrs and isinstance(attrs[0], str) and attrs[0].startswith(GPU_THREADS):
            binds_threads = True
        sampler = _sampler(kind, attrs)
        if sampler is not None:
            if i > prefix:
                raise TraceProblem(f"instruction {i} ({kind}) samples after {POSTPROC}")
            samplers[i] = sampler
    return Skeleton(len(insts), samplers, prefix, binds_threads)


def _sampler(kind: str, attrs: list) -> Sampler | None:
    if kind == TILE:
        n, max_innermost = _ints(kind, attrs, 2)
        # -1 is "no limit"; 0 would make TVM's sampler (a re-sampling replay, as transfer does) loop forever
        if not (2 <= n <= 64 and (max_innermost == -1 or 1 <= max_innermost <= MAX_INT)):
            raise TraceProblem(f"{kind} with n={n}, max_innermost_factor={max_innermost}")
        return Sampler(kind, n=n)
    if kind == PARTITIONED_TILE:
        n, pos, factor = _ints(kind, attrs, 3)
        if not (2 <= n <= 64 and 0 <= pos < n and 1 <= factor <= MAX_INT):  # factor 0: TVM divides by it
            raise TraceProblem(f"{kind} with n={n}, partition_pos={pos}, innerpart_factor={factor}")
        return Sampler(kind, n=n, partition=(pos, factor))
    if kind == CATEGORICAL:
        if not (len(attrs) == 2 and isinstance(attrs[0], list) and isinstance(attrs[1], list)):
            raise TraceProblem(f"{kind} attributes are not [candidates, probabilities]")
        candidates, probs = attrs
        ok = 1 <= len(candidates) == len(probs) <= 4096 and all(_is_int(c) for c in candidates)
        # a re-sampling replay draws from these weights: all zero, or negative, is undefined behaviour in C++
        if not ok or not all(_is_number(p) and 0 <= p < math.inf for p in probs) or not sum(probs) > 0:
            raise TraceProblem(f"{kind} with {len(candidates)} candidates and probabilities {_short(probs)}")
        return Sampler(kind, candidates=len(candidates))
    if kind == LOCATION:
        if attrs:
            raise TraceProblem(f"{kind} takes no attributes")
        return Sampler(kind)
    return None


def _ints(kind: str, attrs: list, n: int) -> list[int]:
    if len(attrs) != n or not all(_is_int(a) and abs(a) <= MAX_INT for a in attrs):
        raise TraceProblem(f"{kind} attributes {_short(attrs)} are not {n} integers")
    return attrs


# -- decisions ---------------------------------------------------------------------------------------------------


def read_decisions(skeleton: Skeleton, decisions: Any) -> dict[int, Any]:
    """The decisions by instruction index: exactly one per sampling instruction, each of its kind and in its range
    as far as the instructions alone tell (see tile_problem for what the loop extents add)."""
    if not isinstance(decisions, list):
        raise TraceProblem("its decisions are not a list")
    # Runs for every decision of every record an import or a sync reads, so verdicts are remembered per instruction
    # and value, keyed by the value's JSON: ``1``, ``true`` and ``1.0`` (equal as Python values, and so one dict key)
    # are judged apart, as the judges' exact type tests tell them apart; a value JSON cannot hold is judged every
    # time. An index that has a sampler is in range, so the range is tested only to say what is wrong.
    samplers, verdicts = skeleton.samplers, skeleton.verdicts
    found: dict[int, Any] = {}
    for entry in decisions:
        if not (type(entry) is list and len(entry) == 2 and type(entry[0]) is int):  # type(): not bool either
            raise TraceProblem(f"decision {_short(entry)} is not [instruction index, value]")
        index, value = entry
        sampler = samplers.get(index)
        if sampler is None:
            if not 0 <= index < skeleton.n_insts:
                raise TraceProblem(f"a decision for instruction {index}, but the trace has {skeleton.n_insts}")
            raise TraceProblem(f"a decision for instruction {index}, which samples nothing")
        if index in found:
            raise TraceProblem(f"two decisions for instruction {index}")
        try:
            key = (index, orjson.dumps(value))
        except (TypeError, orjson.JSONEncodeError):
            problem = _value_problem(sampler, value)
        else:
            problem = verdicts.get(key, UNSEEN)
            if problem is UNSEEN:
                problem = verdicts[key] = _value_problem(sampler, value)
        if problem:
            raise TraceProblem(f"instruction {index} ({sampler.kind}): {problem}")
        found[index] = value
    if len(found) != len(samplers):  # every key of found is a sampler's
        missing = next(i for i in samplers if i not in found)
        raise TraceProblem(f"instruction {missing} ({samplers[missing].kind}) has no decision")
    return found


# A verdict not known yet (a remembered verdict may be None: nothing wrong).
UNSEEN = object()


def _value_problem(sampler: Sampler, value: Any) -> str | None:
    # Runs for every decision of every imported record: exact type tests (JSON integers are ints, never bools here)
    # and min/max instead of a generator per element keep it a few microseconds per record.
    if sampler.is_tile:
        if not (type(value) is list and len(value) == sampler.n and all(type(v) is int for v in value)):
            return f"decision {_short(value)} is not {sampler.n} tile sizes"
        if (min(value) < 1 or max(value) > MAX_INT or math.prod(value) > MAX_INT) and not is_dynamic_tile(value):
            return f"tile sizes {_short(value)} are not positive loop sizes"
        return None
    if type(value) is not int:
        return f"decision {_short(value)} is not an integer"
    if sampler.kind == CATEGORICAL and not 0 <= value < sampler.candidates:
        return f"decision {value} picks none of its {sampler.candidates} candidates"
    if sampler.kind == LOCATION and not -2 <= value <= MAX_INT:  # -2: inline, -1: root, else a loop's position
        return f"decision {value} is no compute location"
    return None


def is_dynamic_tile(value: list) -> bool:
    """TVM's decision for a loop without a constant extent: [-1, 1, ..., 1]."""
    return value[0] == -1 and all(v == 1 for v in value[1:])


def tile_problem(sampler: Sampler, value: list, extent: int | None) -> str | None:
    """What is wrong with tile sizes for a loop of ``extent`` (None: not a constant), the way TVM replays them: it
    keeps sizes that divide the loop perfectly and silently rewrites the others, so those were never measured."""
    pos, factor = sampler.partition
    if extent is None or (sampler.kind == PARTITIONED_TILE and extent % factor):
        return None if is_dynamic_tile(value) else f"tile sizes {value} for a loop TVM does not tile"
    if is_dynamic_tile(value) or math.prod(value) != extent:
        return f"tile sizes {value} do not multiply to the loop extent {extent}"
    if sampler.kind == PARTITIONED_TILE and math.prod(value[pos:]) % factor:
        return f"tile sizes {value} do not keep the inner part a multiple of {factor}"
    return None


# -- a whole record ----------------------------------------------------------------------------------------------


class SkeletonCache:
    """Parsed instruction lists by their canonical JSON: a log repeats a few of them across thousands of records."""

    def __init__(self) -> None:
        self._parsed: dict[str, Skeleton | TraceProblem] = {}

    def get(self, insts_json: str, insts: Any) -> Skeleton:
        parsed = self._parsed.get(insts_json)
        if parsed is None:
            try:
                parsed = parse_skeleton(insts)
            except TraceProblem as e:
                parsed = e
            self._parsed[insts_json] = parsed
        if isinstance(parsed, TraceProblem):
            raise parsed
        return parsed


def trace_parts(trace: Any) -> tuple[Any, Any]:
    if type(trace) is list and len(trace) == 2 and type(trace[0]) is list and type(trace[1]) is list:
        return trace[0], trace[1]  # what JSON parsing gives, without the general tests below
    if not (isinstance(trace, list) and len(trace) == 2 and all(isinstance(p, list) for p in trace)):
        raise TraceProblem("a trace must be [instructions, decisions]")
    return trace[0], trace[1]


def check_trace(trace: Any, insts_json: str, cache: SkeletonCache) -> tuple[Skeleton, dict[int, Any]]:
    """The trace's skeleton and decisions, checked as far as no workload is needed. Raises TraceProblem."""
    insts, decisions = trace_parts(trace)
    skeleton = cache.get(insts_json, insts)
    return skeleton, read_decisions(skeleton, decisions)


def read_record(record: RecordIn, cache: SkeletonCache) -> tuple[Skeleton, dict[int, Any], str] | Problem:
    """The record's skeleton, decisions by instruction and instructions' canonical JSON; or, if anything shows wrong
    without its workload, why. Never raises."""
    problem = (
        run_secs_problem(record.run_secs)
        or name_problem(record.team, "team")
        or name_problem(record.model, "model name")
        or name_problem(record.host, "host name")
        or measured_at_problem(record.created_at)
    )
    if problem:
        return Problem(problem, trace=False)
    try:
        insts, decisions = trace_parts(record.trace)
        insts_json = record.insts_json or canonical_json(insts)
        skeleton = cache.get(insts_json, insts)
        if skeleton.binds_threads != record.device.is_gpu:
            kind = "a GPU" if skeleton.binds_threads else "no GPU"
            return Problem(f"its trace is {kind} schedule, for a device of kind {record.device.kind}", trace=False)
        return skeleton, read_decisions(skeleton, decisions), insts_json
    except TraceProblem as e:
        return Problem(str(e))
    except Exception as e:  # noqa: BLE001 - a check must never be the thing that crashes on odd input
        return Problem(f"malformed trace ({type(e).__name__})")


def record_problem(record: RecordIn, cache: SkeletonCache) -> Problem | None:
    read = read_record(record, cache)
    return read if isinstance(read, Problem) else None


def trace_is_sound(trace: Any) -> bool:
    """Whether a stored trace may be handed to TVM at all: for readers of rows that did not come through these
    checks (a registry written by an older version, or by hand), before they replay them."""
    try:
        insts, decisions = trace_parts(trace)
        read_decisions(parse_skeleton(insts), decisions)
    except Exception:  # noqa: BLE001 - TraceProblem, or anything odd input raises: not sound either way
        return False
    return True


def is_default_schedule(insts: Any) -> bool:
    """Whether a trace's instructions are TVM's default on a CPU: one lookup of the root block, nothing else
    (``registry.tvm_side.defaults.default_trace``: a run files it where every candidate lost to the default)."""
    return isinstance(insts, list) and len(insts) == 1 and isinstance(insts[0], list) and insts[0][:1] == ["GetSBlock"]


def record_problems(records: Sequence[RecordIn]) -> list[Problem | None]:
    """``record_problem`` for each record: the check ``Store.ingest`` runs when it is given no other."""
    cache = SkeletonCache()
    return [record_problem(r, cache) for r in records]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
