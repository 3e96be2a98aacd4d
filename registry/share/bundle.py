"""Bundles: a registry's records with their provenance, in one versioned, checksummed file. No TVM needed.

A bundle is a zip archive (deflated) of JSON-lines members and a manifest::

    manifest.json     format, version, origin registry, time, filters, counts, each member's sha256 and size, and
                      the highest record id it holds (where the next page of a pull or push starts)
    devices.jsonl     {"key", "target", "num_threads", "host_model", "tvm_version"}
    workloads.jsonl   {"shash", "module_equality", "mod_json"}
    skeletons.jsonl   {"hash", "insts"}: instruction lists, shared by the records of one design space
    models.jsonl      {"name", "sha256", "input_shapes", "tasks": [[workload index, task name, weight], ...]}
    efforts.jsonl     [workload index, device index, trials, seconds, [[trials, best µs], ...], plateau]: how hard
                      the sender's tuning runs searched each workload on each device (version 2 on)
    records.jsonl     [id, workload index, device index, skeleton hash, decisions, run_secs, source, origin, team,
                       model, host, tool version, measured at, donor]; donor: [shash, module_equality, device key,
                       trace hash, origin] or null
    predictors.jsonl  {"device" (its index), "kind", "tvm_version", "n_workloads", "n_records", "metrics", "sha256",
                       "blob" (base64)}: each device's newest predictor of each kind that travels (version 3 on)

The checksums catch a truncated or altered file; they do not say who wrote it. Nothing in a bundle is trusted: its
records arrive "imported", are checked as a log's are (``registry.share.exchange_import``), and are trusted only
once ``registry verify`` has re-measured them here.
"""

from __future__ import annotations

import base64
import binascii
import collections
import datetime as dt
import functools
import hashlib
import io
import itertools
import json
import math
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from registry import hostinfo
from registry.errors import BadInputError
from registry.store.rows import utc
from registry.store.validation import MAX_RECORD_ID, REGISTRY_ID, SHA256, name_problem
from registry.store.values import (
    CHUNK,
    ExchangeSet,
    ExDevice,
    ExEffort,
    ExModel,
    ExPredictor,
    ExRecord,
    ExWorkload,
)
from registry.tvm_side import predictor_blob

FORMAT = "tvm-registry-bundle"
VERSION = 3
MEMBERS_V1 = ("devices.jsonl", "workloads.jsonl", "skeletons.jsonl", "models.jsonl", "records.jsonl")
MEMBERS_V2 = (*MEMBERS_V1, "efforts.jsonl")  # version 2 added the effort
MEMBERS = (*MEMBERS_V2, "predictors.jsonl")  # version 3 added predictors; versions 1 and 2 are still read
_MEMBERS = {1: MEMBERS_V1, 2: MEMBERS_V2, 3: MEMBERS}
MAX_MANIFEST = 16 << 20  # bytes: a manifest is a few KB; one declared larger is not read at all
# Bytes of one JSON line: a record is a few hundred, a workload's module JSON or an instruction list at most a few
# MB (the bound TVM logs are read with, tvmlog.MAX_LINE_BYTES). A longer line is refused before it is held whole.
MAX_LINE = 16 << 20
# Bytes the members may inflate to, all together: 10^7 records (a large registry's export, a few GB) fit several
# times. Declared sizes are checked against the manifest and bound what inflating can produce, so a bundle past this
# is refused before a byte is inflated.
MAX_INFLATED = 32 << 30
# How many times its compressed size a bundle may inflate to, past the first MAX_LINE bytes: a registry's members
# compress 4 to 20 times (hashes, decisions, module graphs); deflate reaches about 1000 on zeros, a zip bomb's ratio.
MAX_RATIO = 100

# The predictor kinds a bundle carries (those the registry makes and reads: predictor_blob.KINDS), each with the check
# its blob must pass (raising BadPredictorBlob). Any other kind never travels (predictor_blob.LEGACY_KIND's tars hold
# pickles).
PREDICTOR_KINDS: dict[str, Callable[[bytes], object]] = {
    kind: functools.partial(predictor_blob.decode_kind, kind) for kind in predictor_blob.KINDS
}
# Bytes of one predictor's blob. A predictor trained on 10^5 records is tens of MB (predictor_blob); 64 MiB holds
# that with room, and bounds what one line makes an import hold at once: its base64 text, the bytes, and the arrays
# ``decode`` reads from them.
MAX_BLOB = 64 << 20
MAX_METRICS = 64 << 10  # bytes of a predictor's metrics as JSON: a training's, without per_workload, take under 1 KB
MAX_UNSEEN = 8  # devices a predictor's metrics give scores on without having trained on them
MAX_METRICS_DEPTH = 8  # nesting of its metrics: a training's are 3 deep (per_workload's rows)
MAX_PREDICTOR_COUNT = (1 << 31) - 1  # of its workloads and records: INTEGER columns on PostgreSQL
MAX_TVM_VERSION = 64  # characters of its TVM version: the column's width
# A predictors.jsonl line: the blob as base64, its metrics, and a few short fields.
MAX_PREDICTOR_LINE = 4 * (MAX_BLOB // 3 + 1) + MAX_METRICS + (4 << 10)


@dataclass
class BundleInfo:
    path: Path
    origin: str
    created_at: str
    devices: int
    workloads: int
    records: int
    models: int
    bytes: int
    predictors: int = 0


def is_bundle(path: Path) -> bool:
    """Whether ``path`` is a file that claims to be a bundle: a zip archive, or named ``.bundle`` (a truncated one is
    no readable zip, and is still a bundle to refuse as such); TVM logs are JSON files or folders."""
    if not path.is_file():
        return False
    if path.suffix == ".bundle":
        return True
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04" or zipfile.is_zipfile(path)


def write_bundle(path: Path, exchange: ExchangeSet, filters: dict[str, Any]) -> BundleInfo:
    """Write ``exchange`` to ``path`` (through a temporary file: an interrupted export leaves no half bundle).
    Raises BadInputError when ``path`` cannot be written."""
    tmp = path.with_name(f".{path.name}.partial")
    sums: dict[str, dict[str, Any]] = {}
    n_records = n_predictors = 0
    try:
        try:
            zf = zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6)
        except OSError as e:
            raise BadInputError(f"cannot write the bundle {path}: {e.strerror or e}") from None
        with zf:
            index = {w.ident: i for i, w in enumerate(exchange.workloads)}
            devices = {d.key: i for i, d in enumerate(exchange.devices)}
            _member(zf, "devices.jsonl", (d.__dict__ for d in exchange.devices), sums)
            _member(zf, "workloads.jsonl", (w.__dict__ for w in exchange.workloads), sums)
            _member(zf, "skeletons.jsonl", ({"hash": h, "insts": t} for h, t in exchange.skeletons.items()), sums)
            _member(
                zf,
                "models.jsonl",
                (
                    {"name": m.name, "sha256": m.sha256, "input_shapes": m.input_shapes,
                     "tasks": [[index[ident], task, weight] for ident, task, weight in m.tasks]}
                    for m in exchange.models
                ),
                sums,
            )  # fmt: skip
            # The oldest version that holds what is sent, which older registries read too.
            predictors = exchange.predictors()
            first = next(predictors, None)
            version = 3 if first is not None else 2 if exchange.efforts else 1
            if version >= 2:
                _member(
                    zf,
                    "efforts.jsonl",
                    (
                        [index[e.workload], devices[e.device_key], e.trials, e.seconds, [list(p) for p in e.curve],
                         e.plateau]
                        for e in exchange.efforts
                    ),
                    sums,
                )  # fmt: skip

            def records() -> Iterator[list]:
                nonlocal n_records
                for chunk in exchange.records():
                    n_records += len(chunk)
                    for r in chunk:
                        donor = [*r.donor[0], *r.donor[1:]] if r.donor else None
                        yield [r.source_id, index[r.workload], devices[r.device_key], r.skeleton, r.decisions_json,
                               r.run_secs, r.source, r.origin, r.team, r.model, r.host, r.tool_version,
                               utc(r.created_at).isoformat(), donor]  # fmt: skip

            _member(zf, "records.jsonl", records(), sums)

            def predictor_rows() -> Iterator[dict[str, Any]]:
                nonlocal n_predictors
                for p in itertools.chain([first], predictors):
                    n_predictors += 1
                    yield {"device": devices[p.device_key], "kind": p.kind, "tvm_version": p.tvm_version,
                           "n_workloads": p.n_workloads, "n_records": p.n_records, "metrics": p.metrics,
                           "sha256": p.sha256, "blob": base64.b64encode(p.blob).decode("ascii")}  # fmt: skip

            if version >= 3:
                _member(zf, "predictors.jsonl", predictor_rows(), sums)
            counts = dict(
                devices=len(exchange.devices),
                workloads=len(exchange.workloads),
                skeletons=len(exchange.skeletons),
                models=len(exchange.models),
                records=n_records,
            )
            if version >= 3:
                counts["predictors"] = n_predictors
            created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            # last_record_id: the highest sender's record id in it, where a pull or push of the next page starts
            manifest = dict(format=FORMAT, version=version, origin=exchange.origin, created_at=created,
                            tool_version=hostinfo.tool_version(), tvm_version=hostinfo.tvm_version(),
                            filters=filters, counts=counts, members=sums,
                            last_record_id=exchange.last_record_id)  # fmt: skip
            zf.writestr("manifest.json", json.dumps(manifest, indent=1))
        tmp.replace(path)
    except OSError as e:  # a full disk or a quota, mid-way: the partial file goes, the error is one line
        raise BadInputError(f"cannot write the bundle {path}: {e.strerror or e}") from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # a folder it could not be written in: nothing was
    return BundleInfo(path, exchange.origin, created, counts["devices"], counts["workloads"], n_records,
                      counts["models"], path.stat().st_size, n_predictors)  # fmt: skip


def _member(zf: zipfile.ZipFile, name: str, rows, sums: dict) -> None:
    digest, size = hashlib.sha256(), 0
    with zf.open(name, "w", force_zip64=True) as f:
        buf = io.BytesIO()
        for row in rows:
            buf.write(orjson.dumps(row))
            buf.write(b"\n")
            if buf.tell() > 1 << 20:
                data = buf.getvalue()
                digest.update(data)
                size += len(data)
                f.write(data)
                buf = io.BytesIO()
        data = buf.getvalue()
        digest.update(data)
        size += len(data)
        f.write(data)
    sums[name] = {"sha256": digest.hexdigest(), "bytes": size}


def read_bundle(path: Path, where: str | None = None) -> tuple[ExchangeSet, dict[str, Any]]:
    """The bundle's content and its manifest; ``where`` names it in messages (default: its path).

    Every member is checked against the manifest's checksums first; a bundle that is not one, truncated, altered, or
    of a newer format raises BadInputError (one line)."""
    where = str(path) if where is None else where
    try:
        zf = zipfile.ZipFile(path)
        manifest = _manifest(zf, where)
        members = _MEMBERS[manifest["version"]]
        _check_member_list(zf, manifest, members, where)
        for name in members:
            _check_declared(zf, name, manifest, where)
        _check_sizes(zf, members, where)
        for name in members:
            _check_content(zf, name, manifest, where)
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise BadInputError(f"{where}: not a readable bundle (truncated or not a registry bundle: {e})") from None
    workloads = [ExWorkload(**_fields(w, ExWorkload, where)) for w in _lines(zf, "workloads.jsonl", where)]
    idents = [w.ident for w in workloads]
    devices = [ExDevice(**_fields(d, ExDevice, where)) for d in _lines(zf, "devices.jsonl", where)]
    keys = [d.key for d in devices]
    out = ExchangeSet(origin=manifest["origin"], devices=devices, workloads=workloads)
    for s in _lines(zf, "skeletons.jsonl", where):
        if not (isinstance(s, dict) and type(s.get("hash")) is str and type(s.get("insts")) is str):
            raise BadInputError(f"{where}: malformed skeleton entry (expected its hash and instructions as text)")
        out.skeletons[s["hash"]] = s["insts"]
    try:
        out.models = [
            ExModel(m["name"], m["sha256"], m["input_shapes"],
                    [(_at(idents, i, "workload"), t, w) for i, t, w in m["tasks"]])
            for m in _lines(zf, "models.jsonl", where)
        ]  # fmt: skip
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise BadInputError(f"{where}: malformed model entry ({type(e).__name__}: {e})") from None
    if "efforts.jsonl" in members:
        out.efforts = [
            _effort(row, idents, keys, f"{where}: efforts.jsonl:{n}")
            for n, row in enumerate(_lines(zf, "efforts.jsonl", where), start=1)
        ]
    if "predictors.jsonl" in members:
        out.predictors = _predictors(zf, keys, where)
    out.n_records = int(manifest["counts"]["records"])

    def records() -> Iterator[list[ExRecord]]:
        batch = []
        for line_no, row in enumerate(_lines(zf, "records.jsonl", where), start=1):
            batch.append(_record(row, idents, keys, f"{where}: records.jsonl:{line_no}"))
            if len(batch) >= CHUNK:
                yield batch
                batch = []
        if batch:
            yield batch

    out.records = records
    return out, manifest


def _manifest(zf: zipfile.ZipFile, where: str) -> dict[str, Any]:
    try:
        size = zf.getinfo("manifest.json").file_size
    except KeyError:
        raise BadInputError(f"{where}: a zip file without manifest.json is not a registry bundle") from None
    if size > MAX_MANIFEST:
        raise BadInputError(f"{where}: its manifest declares {size} bytes (at most {MAX_MANIFEST} are read)")
    try:
        manifest = orjson.loads(zf.read("manifest.json"))
    except orjson.JSONDecodeError as e:
        raise BadInputError(f"{where}: its manifest is not JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BadInputError(f"{where}: not a registry bundle (its manifest names no format {FORMAT!r})")
    version = manifest.get("version")
    if not _count(version) or version < 1:
        raise BadInputError(f"{where}: its manifest's format version is {version!r}, not a positive whole number")
    if version > VERSION:
        raise BadInputError(
            f"{where}: bundle format version {version}, written by a newer registry (this one reads up to version "
            f"{VERSION}): upgrade tvm-registry"
        )
    if not isinstance(manifest.get("members"), dict) or not isinstance(manifest.get("counts"), dict):
        raise BadInputError(f"{where}: its manifest lacks the members' checksums or counts")
    counts = manifest["counts"]
    named = ("devices", "workloads", "skeletons", "models", "records") + (("predictors",) if version >= 3 else ())
    for name in named:
        if not _count(counts.get(name)):
            raise BadInputError(f"{where}: its manifest's count of {name} is {counts.get(name)!r}, not a count")
    origin, last = manifest.get("origin"), manifest.get("last_record_id", 0)
    if not (type(origin) is str and REGISTRY_ID.fullmatch(origin)):  # where a push's sync progress is filed
        raise BadInputError(f"{where}: its manifest's origin {origin!r:.60} is not a registry id (32 hex digits)")
    if not (_count(last) and last <= MAX_RECORD_ID):
        raise BadInputError(f"{where}: its manifest's last record id {last!r:.60} is not a record id")
    return manifest


def _count(value: Any) -> bool:
    """Whether ``value`` is a whole number at least 0 as JSON gives one (not a bool, not a string)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_member_list(zf: zipfile.ZipFile, manifest: dict, members: tuple[str, ...], where: str) -> None:
    """Exactly the manifest and the members it lists, each once. A zip may hold two members of one name: the
    checksum would be checked against one and the other read (an audit stored a forged 1 ps latency that way)."""
    names = zf.namelist()
    twice = sorted(n for n, k in collections.Counter(names).items() if k > 1)
    if twice:
        raise BadInputError(f"{where}: holds {twice[0]} more than once (altered bundle)")
    unlisted = sorted(set(names) - {"manifest.json", *members})
    if unlisted:
        raise BadInputError(f"{where}: holds {unlisted[0]}, which is no member of a registry bundle (altered bundle)")
    unknown = sorted(set(manifest["members"]) - set(members))
    if unknown:
        raise BadInputError(f"{where}: its manifest lists {unknown[0]!r}, which is no member of a registry bundle")


def _check_declared(zf: zipfile.ZipFile, name: str, manifest: dict, where: str) -> None:
    """The member's size in the zip's directory is the manifest's: inflating it then yields at most that many bytes
    (zipfile stops there), which ``_check_sizes`` bounds before any is inflated."""
    expected = manifest["members"].get(name)
    if not isinstance(expected, dict):
        raise BadInputError(f"{where}: {name} is not listed in the manifest")
    try:
        declared = zf.getinfo(name).file_size
    except KeyError:
        raise BadInputError(f"{where}: {name} is missing (truncated or altered bundle)") from None
    if declared != expected.get("bytes"):
        raise BadInputError(
            f"{where}: {name} declares {declared} bytes, its manifest {expected.get('bytes')!r} (truncated or altered "
            "bundle)"
        )


def _check_sizes(zf: zipfile.ZipFile, members: tuple[str, ...], where: str) -> None:
    """What the members inflate to, all together: at most MAX_INFLATED, and at most MAX_RATIO times what they take
    in the file (a zip bomb's 1 MB inflating to 1 GB of zeros took a server 2 GB and 12 s to refuse)."""
    inflated = sum(zf.getinfo(n).file_size for n in members)
    compressed = sum(zf.getinfo(n).compress_size for n in members)
    if inflated > MAX_INFLATED:
        raise BadInputError(f"{where}: its members declare {inflated} bytes, more than the {MAX_INFLATED} read")
    if inflated > MAX_LINE and inflated > MAX_RATIO * compressed:
        raise BadInputError(
            f"{where}: its members declare {inflated} bytes, {inflated // max(compressed, 1)} times the "
            f"{compressed} they take (a registry's compress at most {MAX_RATIO} times: altered bundle)"
        )


def _check_content(zf: zipfile.ZipFile, name: str, manifest: dict, where: str) -> None:
    """The member's checksum, and its rows (lines) against the manifest's count of them."""
    digest, rows = hashlib.sha256(), 0
    try:
        with zf.open(name) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
                rows += block.count(b"\n")
    except KeyError:
        raise BadInputError(f"{where}: {name} is missing (truncated or altered bundle)") from None
    if digest.hexdigest() != manifest["members"][name].get("sha256"):
        raise BadInputError(f"{where}: {name} does not match its checksum (truncated or altered bundle)")
    what = name.removesuffix(".jsonl")
    counted = manifest["counts"].get(what, rows)  # efforts.jsonl has no count of its own
    if rows != counted:
        raise BadInputError(f"{where}: its manifest counts {counted} {what}, but {name} holds {rows} (altered bundle)")


def _lines(zf: zipfile.ZipFile, name: str, where: str, limit: int = MAX_LINE) -> Iterator[Any]:
    """Each line of the member as JSON; a line longer than ``limit`` is refused, never read whole."""
    with zf.open(name) as raw, io.BufferedReader(raw, 1 << 20) as f:
        for line_no, line in enumerate(iter(lambda: f.readline(limit + 1), b""), start=1):
            if len(line) > limit:
                raise BadInputError(f"{where}: {name}:{line_no}: a line longer than {limit} bytes (altered bundle)")
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise BadInputError(f"{where}: {name}:{line_no}: not JSON ({e})") from None


def _at(items: list, index: Any, what: str) -> Any:
    """``items[index]`` for an index a bundle gives: a whole number in range (Python would read -1 as the last)."""
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(items):
        raise IndexError(f"{what} index {index!r} is not one of the bundle's {len(items)}")
    return items[index]


# Each field of a device or workload entry, of exactly this JSON type (a bool is no whole number); their values are
# checked where the set is imported (``exchange_import``).
_TYPES: dict[type, dict[str, type]] = {
    ExDevice: {"key": str, "target": dict, "num_threads": int, "host_model": str, "tvm_version": str},
    ExWorkload: {"shash": str, "module_equality": str, "mod_json": str},
}
_TYPE_NAMES = {str: "text", dict: "an object", int: "a whole number"}


def _fields(row: Any, cls, where: str) -> dict[str, Any]:
    types, what = _TYPES[cls], cls.__name__[2:].lower()
    if not isinstance(row, dict) or set(row) != set(types):
        raise BadInputError(f"{where}: malformed {what} entry (expected keys {', '.join(types)})")
    for name, kind in types.items():
        if type(row[name]) is not kind:
            raise BadInputError(f"{where}: a {what}'s {name} {row[name]!r:.60} is not {_TYPE_NAMES[kind]}")
    return row


def _record(row: Any, idents: list, keys: list, where: str) -> ExRecord:
    """A record row as sent, every field of its JSON type; its values are checked where it is imported."""
    try:
        (rid, w, d, skeleton, decisions, secs, source, origin, team, model, host, tool, created, donor) = row
        # Exact type tests, in one pass each: every record of an import comes here.
        if type(rid) is not int or not 1 <= rid <= MAX_RECORD_ID:
            raise ValueError(f"its id {rid!r:.60} is not a whole number from 1 to 2^62")
        # JSON numbers only: float("2e-6") and float(True) would make a latency of a string or a bool
        run_secs = [float(s) for s in secs if type(s) is float or type(s) is int] if type(secs) is list else None
        if run_secs is None or len(run_secs) != len(secs):
            raise ValueError(f"its latencies {secs!r:.60} are not a list of numbers")
        if not type(skeleton) is type(decisions) is type(source) is type(tool) is type(created) is str:
            raise ValueError("its instruction hash, decisions, source, tool version or time is not text")
        if donor is not None and not (type(donor) is list and len(donor) == 5 and all(type(v) is str for v in donor)):
            raise ValueError("its donor is not [shash, module_equality, device key, trace hash, origin]")
        return ExRecord(
            rid, _at(idents, w, "workload"), _at(keys, d, "device"), skeleton, decisions, run_secs, source, origin,
            team, model, host, tool, dt.datetime.fromisoformat(created),
            ((donor[0], donor[1]), donor[2], donor[3], donor[4]) if donor else None,
        )  # fmt: skip
    except (TypeError, ValueError, IndexError) as e:
        raise BadInputError(f"{where}: malformed record ({type(e).__name__}: {e})") from None


def _effort(row: Any, idents: list, keys: list, where: str) -> ExEffort:
    """An effort row as sent; its values are checked where it is imported (``exchange_import``)."""
    try:
        w, d, trials, seconds, curve, plateau = row
        if not isinstance(curve, list) or not all(isinstance(p, list) and len(p) == 2 for p in curve):
            raise ValueError("its curve is not a list of [trials, µs] pairs")
        points = tuple((p[0], p[1]) for p in curve)
        return ExEffort(_at(idents, w, "workload"), _at(keys, d, "device"), trials, seconds, points, plateau)
    except (TypeError, ValueError, IndexError) as e:
        raise BadInputError(f"{where}: malformed effort ({type(e).__name__}: {e})") from None


def _predictors(zf: zipfile.ZipFile, keys: list, where: str) -> Callable[[], Iterator[ExPredictor]]:
    """The predictors of predictors.jsonl, every line checked here (a refusal comes before anything is written),
    then read again on each call, one at a time: only one blob is held at once."""

    def read() -> Iterator[ExPredictor]:
        for n, row in enumerate(_lines(zf, "predictors.jsonl", where, MAX_PREDICTOR_LINE), start=1):
            yield _predictor(row, keys, f"{where}: predictors.jsonl:{n}")

    seen = set()
    for p in read():
        if (p.device_key, p.kind) in seen:  # which of the two would be the device's next version?
            raise BadInputError(f"{where}: two predictors of kind {p.kind} for device {p.device_key[:12]}")
        seen.add((p.device_key, p.kind))
    return read


_PREDICTOR_FIELDS = ("device", "kind", "tvm_version", "n_workloads", "n_records", "metrics", "sha256", "blob")


def _predictor(row: Any, keys: list, where: str) -> ExPredictor:
    """A predictor line, every field checked (``predictor_problem``), its blob decoded from base64."""
    if not isinstance(row, dict) or set(row) != set(_PREDICTOR_FIELDS):
        raise BadInputError(f"{where}: malformed predictor (expected keys {', '.join(_PREDICTOR_FIELDS)})")
    try:
        key = _at(keys, row["device"], "device")
    except IndexError as e:
        raise BadInputError(f"{where}: malformed predictor ({e})") from None
    text = row["blob"]
    if type(text) is not str:
        raise BadInputError(f"{where}: its blob {text!r:.40} is not base64 text")
    if len(text) > 4 * (MAX_BLOB // 3 + 1):
        raise BadInputError(f"{where}: its blob is more than the {MAX_BLOB} bytes a bundle carries")
    try:
        blob = base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise BadInputError(f"{where}: its blob is not base64 ({e})") from None
    p = ExPredictor(key, row["kind"], row["tvm_version"], row["n_workloads"], row["n_records"], row["metrics"], blob,
                    row["sha256"])  # fmt: skip
    problem = predictor_problem(p)
    if problem:
        raise BadInputError(f"{where}: {problem}")
    return p


def predictor_problem(p: ExPredictor) -> str | None:
    """None for a predictor fit to travel, else what is wrong with it: a kind that travels whose check its blob
    passes, of at most MAX_BLOB bytes, that the sha256 it states; counts and TVM version fit for its columns;
    metrics within ``metrics_problem``'s bounds. An export leaves out what an import would refuse."""
    if type(p.kind) is not str or p.kind not in PREDICTOR_KINDS:
        return f"predictor kind {p.kind!r:.40} is not one a bundle carries ({', '.join(PREDICTOR_KINDS)})"
    for what, n in (("workloads", p.n_workloads), ("records", p.n_records)):
        if not (_count(n) and n <= MAX_PREDICTOR_COUNT):
            return f"its count of {what} {n!r:.40} is not a whole number from 0 to {MAX_PREDICTOR_COUNT}"
    problem = name_problem(p.tvm_version, "its TVM version") if p.tvm_version is not None else "no TVM version"
    if problem or len(p.tvm_version) > MAX_TVM_VERSION:
        return problem or f"its TVM version is longer than {MAX_TVM_VERSION} characters"
    problem = metrics_problem(p.metrics)
    if problem:
        return problem
    if len(p.blob) > MAX_BLOB:
        return f"its blob is {len(p.blob)} bytes, more than the {MAX_BLOB} bytes a bundle carries"
    if not (type(p.sha256) is str and SHA256.fullmatch(p.sha256)) or hashlib.sha256(p.blob).hexdigest() != p.sha256:
        return f"its blob does not match its sha256 {p.sha256!r:.70} (altered bundle)"
    try:
        PREDICTOR_KINDS[p.kind](p.blob)
    except predictor_blob.BadPredictorBlob as e:
        return f"its blob is no {p.kind} predictor ({e})"
    return None


def metrics_problem(metrics: Any) -> str | None:
    """None for a predictor's metrics fit to store and show: a JSON object of at most MAX_METRICS bytes, nested at
    most MAX_METRICS_DEPTH deep, of JSON values only; an "origin" that is a registry id; an evaluation of finite
    numbers, a random ranking's score ("random") next to each of the model's ("held_out", whose workloads and records
    are counts), as ``registry predictor list`` reads them."""
    if not isinstance(metrics, dict):
        return f"its metrics {metrics!r:.40} are not a JSON object"
    problem = _json_problem(metrics, MAX_METRICS_DEPTH)
    if problem:
        return f"its metrics {problem}"
    try:
        size = len(orjson.dumps(metrics))
    except orjson.JSONEncodeError as e:  # a whole number past 64 bits, which no JSON reader here takes
        return f"its metrics are not JSON ({e})"
    if size > MAX_METRICS:
        return f"its metrics take {size} bytes as JSON, more than {MAX_METRICS}"
    origin = metrics.get("origin")
    if origin is not None and not (type(origin) is str and REGISTRY_ID.fullmatch(origin)):
        return f"its metrics' origin {origin!r:.40} is not a registry id (32 hex digits)"
    for name in ("device", "trained_on"):  # what `predictor list` and a transfer's report print of it
        problem = name_problem(metrics.get(name), f"its metrics' {name}")
        if problem:
            return problem
    if "held_out" in metrics or "random" in metrics:
        held, rand = metrics.get("held_out"), metrics.get("random")
        numbers = lambda d: isinstance(d, dict) and all(_number(v) for v in d.values())  # noqa: E731
        if not (numbers(held) and numbers(rand) and set(held) - {"workloads", "records"} <= set(rand)):
            return "its metrics' held_out and random are not finite numbers, a random one for each held-out score"
        problem = next((p for p in map(_score_problem, [*held.items(), *rand.items()]) if p), None)
        if problem:
            return problem
    return _unseen_problem(metrics)


def _unseen_problem(metrics: dict) -> str | None:
    """None for a predictor's scores on devices it never trained on (``bench/predictor/train.py``: by device name,
    at most MAX_UNSEEN of them, each a set of finite scores in their ranges), or for none; else what is wrong."""
    if "unseen_devices" not in metrics:
        return None
    unseen = metrics["unseen_devices"]
    if not (isinstance(unseen, dict) and len(unseen) <= MAX_UNSEEN):
        return f"its metrics' unseen_devices are not an object of at most {MAX_UNSEEN} devices"
    for name, scores in unseen.items():
        problem = name_problem(name, "its metrics' unseen device")
        if problem:
            return problem
        if not (isinstance(scores, dict) and all(_number(v) for v in scores.values())):
            return f"its metrics' scores on unseen device {name} are not finite numbers"
        problem = next((p for p in map(_score_problem, scores.items()) if p), None)
        if problem:
            return problem
    return None


def _score_problem(item: tuple[str, Any]) -> str | None:
    """None for an evaluation score in its range (``SCORE_RANGES``; a random ranking's, "random_top1", as the
    model's), else what is wrong."""
    name, score = item
    stem = name.removeprefix("random_").split("@")[0].rstrip("0123456789")
    low, high = SCORE_RANGES.get(stem, (float("-inf"), float("inf")))
    if not low <= score <= high:
        return f"its metrics' {name} score {score!r:.20} is outside [{low}, {high}]"
    return None


# The range of each evaluation score a predictor's metrics may state (registry.tvm_side.predictor_scores): the top-k
# scores, recall and pairwise accuracy are shares, Spearman a correlation, regret a latency ratio minus 1.
SCORE_RANGES = {"top": (0.0, 1.0), "recall": (0.0, 1.0), "pairwise": (0.0, 1.0), "spearman": (-1.0, 1.0),
                "regret": (0.0, float("inf"))}  # fmt: skip


def _json_problem(value: Any, depth: int) -> str | None:
    if isinstance(value, dict | list):
        if depth == 0:
            return f"are nested deeper than {MAX_METRICS_DEPTH}"
        if isinstance(value, dict) and not all(type(k) is str for k in value):
            return "have a name that is not text"
        items = value.values() if isinstance(value, dict) else value
        return next((p for v in items if (p := _json_problem(v, depth - 1))), None)
    if value is None or type(value) in (bool, int, float, str):
        return None
    return f"hold a {type(value).__name__}, which is no JSON value"


def _number(value: Any) -> bool:
    return type(value) is int or (type(value) is float and math.isfinite(value))
