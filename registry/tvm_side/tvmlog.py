"""TVM's JSONDatabase format on disk, read and written without importing TVM.

A MetaSchedule work dir holds two NDJSON files:

- ``database_workload.json``: one ``[structural_hash, base64]`` per line, where the base64 payload is an 8-byte
  little-endian length followed by the IRModule's JSON graph;
- ``database_tuning_record.json``: one ``[workload_line, [trace, run_secs, target, args_info]]`` per line.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from registry.errors import BadInputError
from registry.store.rows import canonical_json

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
# A record line is a few KB and a workload line tens of KB (hundreds for a large fused operator). Lines are read in
# chunks of at most this, so a huge line is refused after 16 MiB instead of read whole into memory.
MAX_LINE_BYTES = 16 << 20


def decode_module(b64: str) -> str:
    """The JSON graph inside a workload line's base64 payload. Raises ValueError when it is not one."""
    raw = base64.b64decode(b64, validate=True)
    if len(raw) < 8:
        raise ValueError("payload shorter than its length header")
    (n,) = struct.unpack("<Q", raw[:8])
    if n != len(raw) - 8:
        raise ValueError(f"payload says {n} bytes but holds {len(raw) - 8}")
    return raw[8:].decode("utf-8")


def encode_module(mod_json: str) -> str:
    data = mod_json.encode("utf-8")
    return base64.b64encode(struct.pack("<Q", len(data)) + data).decode("ascii")


def module_tvm_version(mod_json: str) -> str | None:
    """The TVM version that wrote a JSON graph (TVM stamps it into ``metadata``). Raises ValueError for non-graphs."""
    try:
        graph = orjson.loads(mod_json)
    except orjson.JSONDecodeError:
        raise ValueError("the module is not JSON") from None
    if not isinstance(graph, dict) or not isinstance(graph.get("metadata", {}), dict):
        raise ValueError("the module is not a TVM JSON graph")
    version = (graph.get("metadata") or {}).get("tvm_version")
    return str(version) if version is not None else None


@dataclass(frozen=True)
class LogPair:
    """The two files of one JSONDatabase."""

    workload_file: Path
    record_file: Path


def find_logs(path: Path) -> list[LogPair]:
    """Every JSONDatabase under ``path``: a work dir, a folder of work dirs, or one of the two files itself."""
    if not path.exists():
        raise BadInputError(f"{path}: no such file or directory")
    if path.is_file():
        folder = path.parent
        pair = LogPair(folder / WORKLOAD_FILE, folder / RECORD_FILE)
        if path.name not in (WORKLOAD_FILE, RECORD_FILE):
            raise BadInputError(f"{path}: expected a MetaSchedule work dir or a {WORKLOAD_FILE}/{RECORD_FILE} file")
        if not pair.workload_file.exists():
            raise BadInputError(f"{path}: its workloads file {pair.workload_file} is missing")
        return [pair]
    pairs = []
    for wl_file in sorted(path.rglob(WORKLOAD_FILE)):
        rec_file = wl_file.parent / RECORD_FILE
        if rec_file.exists():
            pairs.append(LogPair(wl_file, rec_file))
    if not pairs:
        raise BadInputError(f"{path}: no {WORKLOAD_FILE} with a {RECORD_FILE} beside it was found")
    return pairs


def _lines(file: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, the line's bytes) for each non-empty line; a line longer than MAX_LINE_BYTES is a
    BadInputError."""
    try:
        with open(file, "rb") as f:
            lineno = 0
            while line := f.readline(MAX_LINE_BYTES + 1):
                lineno += 1
                if len(line) > MAX_LINE_BYTES:
                    raise BadInputError(
                        f"{file}:{lineno}: a line longer than {MAX_LINE_BYTES >> 20} MiB, which no MetaSchedule log "
                        "writes; not read further"
                    )
                if line.isspace():  # (not strip(), which copies every line of a log of millions)
                    continue
                yield lineno, line
    except OSError as e:
        raise BadInputError(f"{file}: cannot read ({e.strerror})") from None


def _parsed(file: Path, lineno: int, line: bytes) -> Any:
    try:
        return orjson.loads(line)  # bytes: orjson checks the UTF-8 itself
    except orjson.JSONDecodeError as e:
        reason = str(e).split(":")[0]
        raise BadInputError(f"{file}:{lineno}: not valid JSON ({reason}); is the log truncated?") from None


def read_lines(file: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for each non-empty line; a line that is not JSON, or is longer than
    MAX_LINE_BYTES, is a BadInputError."""
    for lineno, line in _lines(file):
        yield lineno, _parsed(file, lineno, line)


@dataclass(frozen=True)
class RawWorkload:
    shash: str
    mod_json: str
    where: str  # "file:line", for error messages


class RawRecord(NamedTuple):  # a tuple, not a frozen dataclass: built for every record, at half the cost
    workload_index: int  # 0-based line index into the workload file, as TVM writes it
    trace: Any
    run_secs: Any  # as logged (a tuple when it is a list): registry.store.validation judges the values
    target: dict[str, Any]
    args_info: Any
    where: str  # "file:line", for error messages
    # the canonical JSON of trace[0] where the reader knows it (an instruction list seen before), else None
    insts_json: str | None = None


def read_workloads(file: Path) -> list[RawWorkload]:
    out = []
    for lineno, entry in read_lines(file):
        where = f"{file}:{lineno}"
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
            raise BadInputError(f"{where}: expected [structural_hash, base64 module]")
        try:
            out.append(RawWorkload(entry[0], decode_module(entry[1]), where))
        except (ValueError, binascii.Error, UnicodeDecodeError) as e:
            raise BadInputError(f"{where}: corrupt workload payload ({e})") from None
    return out


def read_records(file: Path) -> Iterator[RawRecord]:
    """Records one by one: a log can hold millions."""
    known = _KnownInstructions()
    where_prefix = f"{file}:"
    for lineno, line in _lines(file):
        where = f"{where_prefix}{lineno}"
        entry, insts_json = known.parse(line)
        if entry is None:
            entry = _parsed(file, lineno, line)
        try:
            index, (trace, run_secs, target, args_info) = entry
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise ValueError("workload index")
            if not isinstance(target, dict) or not isinstance(target.get("kind"), str):
                raise ValueError("target")
        except (TypeError, ValueError):
            raise BadInputError(f"{where}: expected [workload_index, [trace, run_secs, target, args_info]]") from None
        if insts_json is None:
            known.learn(line, entry)
        secs = tuple(run_secs) if isinstance(run_secs, list) else () if run_secs is None else run_secs
        yield RawRecord(index, trace, secs, target, args_info, where, insts_json)


class _KnownInstructions:
    """Parses a record line whose instruction list is one seen before without parsing that list again.

    A record line is ``[index,[[INSTRUCTIONS,DECISIONS],RUN_SECS,TARGET,ARGS_INFO]]``, and the instructions are most
    of its bytes and of the objects JSON parsing makes (a thousand bytes, a hundred and fifty lists and strings);
    a tuner's log repeats a few lists across thousands of records. Per workload index, the last few lists seen are
    kept as their exact bytes, the parsed list (shared by every record that has it: nothing mutates a trace) and its
    canonical JSON. A line whose bytes continue with one of them is parsed from the decisions on. Anything else,
    whitespace included, takes the whole parse, which also says what is wrong with a bad line.
    """

    PER_WORKLOAD = 8

    def __init__(self) -> None:
        self._by_index: dict[int, list[tuple[bytes, list, str]]] = {}

    @staticmethod
    def _start(line: bytes) -> tuple[int, int] | None:
        """(workload index, where the instructions begin) of a compact line, else None."""
        comma = line.find(b",", 1, 24)
        digits = line[1:comma]
        if comma < 0 or line[:1] != b"[" or not digits.isdigit() or (digits[:1] == b"0" and len(digits) > 1):
            return None
        if line[comma : comma + 3] != b",[[":
            return None
        return int(digits), comma + 3

    def parse(self, line: bytes) -> tuple[Any, str | None]:
        """(the line parsed, the canonical JSON of its instructions), or (None, None): parse it whole."""
        start = self._start(line)
        known = self._by_index.get(start[0]) if start else None
        if not known:
            return None, None
        index, at = start
        for n, (raw, insts, insts_json) in enumerate(known):
            end = at + len(raw)
            if line.startswith(raw, at) and line[end : end + 1] == b",":
                rest = line.rstrip()
                if not rest.endswith(b"]]"):
                    return None, None
                try:
                    decisions, run_secs, target, args_info = orjson.loads(b"[[" + rest[end + 1 : -1])
                except (orjson.JSONDecodeError, ValueError, TypeError):
                    return None, None
                if not (isinstance(decisions, list) and len(decisions) == 1):
                    return None, None
                if n:  # the most recently used first
                    known.insert(0, known.pop(n))
                return [index, [[insts, decisions[0]], run_secs, target, args_info]], insts_json
        return None, None

    def learn(self, line: bytes, entry: list) -> None:
        """Remember the instruction list of a line parsed whole (``entry``), where its bytes can be told apart."""
        start = self._start(line)
        trace = entry[1][0]
        if start is None or not (isinstance(trace, list) and len(trace) == 2 and isinstance(trace[0], list)):
            return
        index, at = start
        try:  # the instructions end where the decisions begin; decisions are integers, written exactly as orjson would
            end = line.find(b"," + orjson.dumps(trace[1]) + b"],", at)
        except (TypeError, orjson.JSONEncodeError):
            return
        if end < 0:
            return
        raw = line[at:end]
        try:
            if orjson.loads(raw) != trace[0]:
                return
        except orjson.JSONDecodeError:
            return
        known = self._by_index.setdefault(index, [])
        known.insert(0, (raw, trace[0], canonical_json(trace[0])))
        del known[self.PER_WORKLOAD :]


def write_database(folder: Path, workloads: list[tuple[str, str]], records: Iterator[tuple[int, list]]) -> int:
    """Write a JSONDatabase that plain TVM loads: ``workloads`` as (shash, mod_json), ``records`` as
    (workload index, [trace, run_secs, target, args_info]). Files are written beside and renamed into place, so an
    interrupted export never leaves a half-written database. Returns the number of records written; a folder that
    cannot be written is a BadInputError naming it."""
    tmp_wl, tmp_rec = folder / f".{WORKLOAD_FILE}.tmp", folder / f".{RECORD_FILE}.tmp"
    n = 0
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(tmp_wl, "w", encoding="utf-8") as f:
            for shash, mod_json in workloads:
                f.write(json.dumps([shash, encode_module(mod_json)]) + "\n")
        with open(tmp_rec, "w", encoding="utf-8") as f:
            for index, body in records:
                f.write(json.dumps([index, body], separators=(",", ":")) + "\n")
                n += 1
        # Both files are complete before either replaces its old version; the window between the renames is two
        # system calls.
        tmp_wl.replace(folder / WORKLOAD_FILE)
        tmp_rec.replace(folder / RECORD_FILE)
    except OSError as e:
        raise BadInputError(f"{e.filename or folder}: cannot write the export there ({e.strerror})") from None
    finally:
        for tmp in (tmp_wl, tmp_rec):
            with contextlib.suppress(OSError):  # there is nothing to remove where nothing could be written
                tmp.unlink(missing_ok=True)
    return n
