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

The checksums catch a truncated or altered file; they do not say who wrote it. Nothing in a bundle is trusted: its
records arrive "imported", are checked as a log's are (``registry.share.exchange_import``), and are trusted only
once ``registry verify`` has re-measured them here.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from registry import hostinfo
from registry.errors import BadInputError
from registry.store.rows import utc
from registry.store.values import CHUNK, ExchangeSet, ExDevice, ExEffort, ExModel, ExRecord, ExWorkload

FORMAT = "tvm-registry-bundle"
VERSION = 2
MEMBERS_V1 = ("devices.jsonl", "workloads.jsonl", "skeletons.jsonl", "models.jsonl", "records.jsonl")
MEMBERS = (*MEMBERS_V1, "efforts.jsonl")  # version 2 added the effort; a version 1 bundle is still read
MAX_MANIFEST = 16 << 20  # bytes: a manifest is a few KB; one declared larger is not read at all


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
    n_records = 0
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
            if exchange.efforts:  # else a version 1 bundle, which registries before version 2 read too
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
            counts = dict(
                devices=len(exchange.devices),
                workloads=len(exchange.workloads),
                skeletons=len(exchange.skeletons),
                models=len(exchange.models),
                records=n_records,
            )
            created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            # last_record_id: the highest sender's record id in it, where a pull or push of the next page starts
            version = VERSION if exchange.efforts else 1
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
                      counts["models"], path.stat().st_size)  # fmt: skip


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


def read_bundle(path: Path) -> tuple[ExchangeSet, dict[str, Any]]:
    """The bundle's content and its manifest.

    Every member is checked against the manifest's checksums first; a bundle that is not one, truncated, altered, or
    of a newer format raises BadInputError (one line)."""
    where = str(path)
    try:
        zf = zipfile.ZipFile(path)
        manifest = _manifest(zf, where)
        members = MEMBERS_V1 if manifest["version"] == 1 else MEMBERS
        _check_member_list(zf, manifest, members, where)
        for name in members:
            _check_member(zf, name, manifest, where)
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise BadInputError(f"{where}: not a readable bundle (truncated or not a registry bundle: {e})") from None
    workloads = [ExWorkload(**_fields(w, ExWorkload, where)) for w in _lines(zf, "workloads.jsonl", where)]
    idents = [w.ident for w in workloads]
    devices = [ExDevice(**_fields(d, ExDevice, where)) for d in _lines(zf, "devices.jsonl", where)]
    keys = [d.key for d in devices]
    out = ExchangeSet(origin=str(manifest.get("origin", "")), devices=devices, workloads=workloads)
    try:
        out.skeletons = {str(s["hash"]): str(s["insts"]) for s in _lines(zf, "skeletons.jsonl", where)}
    except (KeyError, TypeError) as e:
        raise BadInputError(f"{where}: malformed skeleton entry ({type(e).__name__}: {e})") from None
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
    for name in ("devices", "workloads", "skeletons", "models", "records"):
        if not _count(counts.get(name)):
            raise BadInputError(f"{where}: its manifest's count of {name} is {counts.get(name)!r}, not a count")
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


def _check_member(zf: zipfile.ZipFile, name: str, manifest: dict, where: str) -> None:
    expected = manifest["members"].get(name)
    if not isinstance(expected, dict):
        raise BadInputError(f"{where}: {name} is not listed in the manifest")
    try:
        declared = zf.getinfo(name).file_size
    except KeyError:
        raise BadInputError(f"{where}: {name} is missing (truncated or altered bundle)") from None
    if declared != expected.get("bytes"):  # checked before a byte of it is inflated
        raise BadInputError(
            f"{where}: {name} declares {declared} bytes, its manifest {expected.get('bytes')!r} (truncated or altered "
            "bundle)"
        )
    digest = hashlib.sha256()
    try:
        with zf.open(name) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except KeyError:
        raise BadInputError(f"{where}: {name} is missing (truncated or altered bundle)") from None
    if digest.hexdigest() != expected.get("sha256"):
        raise BadInputError(f"{where}: {name} does not match its checksum (truncated or altered bundle)")


def _lines(zf: zipfile.ZipFile, name: str, where: str) -> Iterator[Any]:
    with zf.open(name) as f:
        for line_no, line in enumerate(f, start=1):
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise BadInputError(f"{where}: {name}:{line_no}: not JSON ({e})") from None


def _at(items: list, index: Any, what: str) -> Any:
    """``items[index]`` for an index a bundle gives: a whole number in range (Python would read -1 as the last)."""
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(items):
        raise IndexError(f"{what} index {index!r} is not one of the bundle's {len(items)}")
    return items[index]


def _fields(row: Any, cls, where: str) -> dict[str, Any]:
    names = list(cls.__dataclass_fields__)
    if not isinstance(row, dict) or set(row) != set(names):
        raise BadInputError(f"{where}: malformed {cls.__name__[2:].lower()} entry (expected keys {', '.join(names)})")
    return row


def _record(row: Any, idents: list, keys: list, where: str) -> ExRecord:
    try:
        (rid, w, d, skeleton, decisions, secs, source, origin, team, model, host, tool, created, donor) = row
        return ExRecord(
            int(rid), _at(idents, w, "workload"), _at(keys, d, "device"), str(skeleton), str(decisions),
            [float(s) for s in secs], str(source),
            str(origin), team, model, host, str(tool), dt.datetime.fromisoformat(created),
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
