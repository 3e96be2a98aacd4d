"""A served registry as a storage: ``RestStorage`` answers the catalogue's, the browsing and the record reads by
asking ``registry serve`` over HTTP, so that ``registry --db http://host:port lookup|show|stats|devices|report``
prints what the same command prints against the database, and ``registry transfer|tune --db http://... --overlay
FILE`` reads the served registry as the shared side of an overlay (``registry.share.overlay``), which takes the
writes. As MLflow's REST store implements the abstract store its SQL store implements, this is a second
implementation of the protocols in ``registry.store.interface``, beside ``Store``.

The wire format is the one place both sides share: each read is ``GET /api/v1/storage/{method}?args=JSON`` (the
server's ``registry.server.storage_api``), its keyword arguments and its answer the JSON of the values of
``registry.store.values`` (a datetime as ISO 8601, bytes as base64, a dict's int keys as text). Both sides decode
with ``decode``, against the protocol method's own annotations: a server's answer is a claim, read within
``Limits`` (``registry.share.remote``) and checked field by field before any caller sees it, and the server checks
a client's arguments the same way. Only reads travel: a write to a served registry goes by ``registry push``.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import math
import re
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from registry.errors import BadInputError, DeviceNotFoundError, UnknownDeviceError, printable
from registry.share.remote import Limits, Remote, RemoteError
from registry.store.interface import (
    Browsing,
    Catalogue,
    LeaseStorage,
    RecordReads,
    Verification,
)
from registry.store.query import host_device, is_host
from registry.store.validation import CLOCK_SLACK_S, MAX_LEASE_S, effort_problem
from registry.store.values import (
    BrowseFilter,
    BrowsePage,
    Claim,
    DeviceCoverage,
    DeviceListing,
    DeviceRecords,
    DeviceRow,
    DonorRecord,
    DonorRow,
    Effort,
    IndexedSet,
    LookupFilter,
    LookupRow,
    ModelRow,
    PlainTaskRow,
    PredictorInfo,
    RecordHistory,
    RecordProvenance,
    RegistryStats,
    StoredPredictor,
    StoredRecord,
    StoredWorkload,
    TaskRow,
    TuningState,
    Verdict,
)

__all__ = ["MAX_DEVICE_RECORDS", "READS", "RestStorage", "WireError", "decode", "encode", "open_served", "read_of"]

PATH = "/api/v1/storage"
MAX_NAME = 200  # characters of a lease holder's name a server's effort may carry to a printed line
# The most records one ``device_records`` read hands out: more is refused in one line (`registry pull` them instead).
MAX_DEVICE_RECORDS = 5000


class WireReads:
    """The two record reads whose answers travel in another shape than they return: ``workload_ids`` as (ident, id)
    pairs, since JSON's keys are text, and ``device_records`` whole, at most ``MAX_DEVICE_RECORDS`` records."""

    def workload_ids(self, idents: Sequence[tuple[str, str]]) -> list[tuple[tuple[str, str], int]]: ...

    def device_records(
        self, device_id: int, *, best_only: bool = False, unsound: bool = False
    ) -> tuple[dict[int, StoredWorkload], list[StoredRecord]]: ...


# The reads a served registry answers: the catalogue, the browsing reads, the record reads (what an overlay's shared
# side is asked: `registry transfer|tune --db URL --overlay FILE`), and efforts, without who holds a lease.
READS: dict[str, Any] = {
    **{name: getattr(Catalogue, name) for name in vars(Catalogue) if not name.startswith("_")},
    **{name: getattr(Browsing, name) for name in vars(Browsing) if not name.startswith("_")},
    **{name: getattr(RecordReads, name) for name in vars(RecordReads) if not name.startswith("_")},
    "workload_ids": WireReads.workload_ids,
    "device_records": WireReads.device_records,
    "efforts": LeaseStorage.efforts,
    # `registry --db URL verify`: the imported records to re-measure here (its verdicts stay here: RestStorage)
    "count_imported": Verification.count_imported,
    "imported_ids": Verification.imported_ids,
    "claims": Verification.claims,
}
MAX_INT = 2**63
INT_KEY = re.compile(r"-?\d{1,19}")


class WireError(ValueError):
    """A value that is not what its annotation says: the message names where in the value."""


def read_of(name: str) -> tuple[dict[str, Any], Any]:
    """The parameter types (name -> annotation) and return annotation of the read ``name``; KeyError if it is
    none of ``READS``."""
    hints = typing.get_type_hints(READS[name])
    returns = hints.pop("return")
    return hints, returns


def encode(value: Any) -> bytes:
    """``value`` (a value of ``registry.store.values``, a list, dict or scalar of them) as the wire's JSON."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_NON_STR_KEYS)


def _default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} does not travel")


def decode(value: Any, tp: Any, where: str) -> Any:
    """``value`` (parsed JSON) as the annotation ``tp`` says it is; WireError, naming ``where``, when it is not."""
    if tp is Any or tp is typing.Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is not type(None):
                try:
                    return decode(value, option, where)
                except WireError:
                    continue
        raise WireError(f"{where} is none of {tp}")
    if origin is not None:
        return _container(value, origin, typing.get_args(tp), where)
    if dataclasses.is_dataclass(tp):
        return _dataclass(value, tp, where)
    return _scalar(value, tp, where)


def _scalar(value: Any, tp: Any, where: str) -> Any:
    if tp is bool and type(value) is bool:
        return value
    if tp is int and type(value) is int and -MAX_INT <= value < MAX_INT:
        return value
    if tp is float and type(value) in (int, float) and math.isfinite(value):
        return float(value)
    if tp is str and type(value) is str:
        return value
    if tp is list and type(value) is list:  # a trace: its shape is checked where it is replayed, in a worker
        return value
    if tp is bytes and type(value) is str:
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            raise WireError(f"{where} is not base64") from None
    if tp is dt.datetime and type(value) is str:
        try:
            return dt.datetime.fromisoformat(value)
        except ValueError:
            raise WireError(f"{where} is not an ISO 8601 time") from None
    if tp is type(None) and value is None:
        return None
    raise WireError(f"{where} is not {getattr(tp, '__name__', tp)}")


def _container(value: Any, origin: Any, args: tuple, where: str) -> Any:
    if origin is dict:
        if type(value) is not dict:
            raise WireError(f"{where} is not an object")
        key_type, item_type = args
        out = {}
        for k, v in value.items():
            if key_type is int:
                if not INT_KEY.fullmatch(k):
                    raise WireError(f"{where}: key {k[:20]!r} is not an integer")
                k = int(k)
            out[k] = decode(v, item_type, f"{where}[{k!r}]"[:200])
        return out
    if type(value) is not list:
        raise WireError(f"{where} is not a list")
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise WireError(f"{where} does not have {len(args)} items")
        return tuple(decode(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(value, args, strict=True)))
    if origin in (list, Sequence, typing.Sequence):
        return [decode(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    raise WireError(f"{where}: {origin} does not travel")


def _dataclass(value: Any, cls: type, where: str) -> Any:
    if type(value) is not dict:
        raise WireError(f"{where} is not an object")
    hints = typing.get_type_hints(cls)
    fields = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise WireError(f"{where} has no {f.name!r}")
            continue
        fields[f.name] = decode(value[f.name], hints[f.name], f"{where}.{f.name}")
    return cls(**fields)


class RestStorage(Catalogue, Browsing, RecordReads, Verification):
    """A registry served by ``registry serve`` at ``url``, read over HTTP with a reader's ``token`` (None: a public
    server). Every answer is decoded against the protocol's annotations (``decode``) and bounded by ``limits``; one
    that is not what the read returns is one line (``RemoteError``), never a value a caller would trust."""

    def __init__(self, url: str, token: str | None, limits: Limits | None = None) -> None:
        self.remote = Remote(url, token, limits)
        self.url = self.remote.url  # what `stats` names as the database: the server, never its database's URL

    def _call(self, name: str, **kwargs: Any) -> Any:
        _, returns = read_of(name)
        args = encode(kwargs).decode()
        try:
            answer = self.remote.json("GET", f"{PATH}/{name}", {"args": args})
        except RemoteError as e:
            if e.status == 404 and "/storage" in str(e) and "nothing at" in str(e):
                raise RemoteError(
                    f"{self.url}: this server answers no storage reads (a registry server older than this client?)"
                ) from None
            raise
        try:
            return decode(answer, returns, f"{name}'s answer")
        except WireError as e:
            raise RemoteError(f"{self.url}{PATH}/{name}: {e} (is this a registry server?)") from None

    # -- Catalogue ------------------------------------------------------------------------------------------------

    def all_devices(self) -> list[DeviceRow]:
        return self._call("all_devices")

    def resolve_devices(self, selector: str) -> list[DeviceRow]:
        """``host`` is this machine (the client's CPU and TVM release), not the server's: resolved here."""
        if selector.strip() != "host":
            return self._call("resolve_devices", selector=selector)
        devices = self.all_devices()
        found = [d for d in devices if is_host(d)]
        if not found:
            known = ", ".join(f"{d.id}:{d.name}" for d in devices)
            raise DeviceNotFoundError(
                f"no device 'host' on this machine in the registry (known: {known or 'none yet'}); see `registry "
                "devices`"
            )
        return found

    def resolve_one_device(self, selector: str) -> DeviceRow:
        if selector.strip() != "host":
            return self._call("resolve_one_device", selector=selector)
        found = host_device(self.resolve_devices(selector))
        if len(found) > 1:
            choices = ", ".join(f"{d.id} ({d.name}, {d.host_model}, TVM {d.tvm_version})" for d in found)
            raise UnknownDeviceError(f"device 'host' is ambiguous; give its id, one of: {choices}")
        return found[0]

    def devices(self) -> list[DeviceListing]:
        return self._call("devices")

    def lookup(self, f: LookupFilter) -> list[LookupRow]:
        return self._call("lookup", f=f)

    def stats(self) -> RegistryStats:
        return self._call("stats")

    def newest_record_id(self) -> int:
        return self._call("newest_record_id")

    def list_predictors(self, device_id: int | None = None) -> list[PredictorInfo]:
        return self._call("list_predictors", device_id=device_id)

    def find_models(self, selector: str, sha256: str | None = None) -> list[ModelRow]:
        return self._call("find_models", selector=selector, sha256=sha256)

    def model_names(self, limit: int = 10) -> list[str]:
        return self._call("model_names", limit=limit)

    def plain_tasks(self) -> list[PlainTaskRow]:
        return self._call("plain_tasks")

    def model_tasks(self, model_id: int) -> list[TaskRow]:
        return self._call("model_tasks", model_id=model_id)

    def busiest_device(self, workload_ids: Sequence[int]) -> tuple[int, str] | None:
        return self._call("busiest_device", workload_ids=list(workload_ids))

    def record_history(self, workload_ids: Sequence[int], device_id: int) -> RecordHistory:
        return self._call("record_history", workload_ids=list(workload_ids), device_id=device_id)

    # -- Browsing -------------------------------------------------------------------------------------------------

    def coverage(self, model_id: int) -> list[DeviceCoverage]:
        return self._call("coverage", model_id=model_id)

    def default_latencies(self, workload_ids: Sequence[int], device_id: int) -> dict[int, float]:
        return self._call("default_latencies", workload_ids=list(workload_ids), device_id=device_id)

    def workload_hashes(self, workload_ids: Sequence[int]) -> dict[int, str]:
        return self._call("workload_hashes", workload_ids=list(workload_ids))

    def browse(self, f: BrowseFilter) -> BrowsePage:
        return self._call("browse", f=f)

    # -- RecordReads: what an overlay reads of its shared side, and `show` and `report` read besides --------------

    def workload_ids(self, idents: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        return dict(self._call("workload_ids", idents=[tuple(i) for i in idents]))

    def workloads_by_id(self, ids: Sequence[int]) -> dict[int, StoredWorkload]:
        return self._call("workloads_by_id", ids=list(ids))

    def top_k(self, workload_id: int, device_id: int, k: int) -> list[StoredRecord]:
        return self._call("top_k", workload_id=workload_id, device_id=device_id, k=k)

    def count_records(self, device_id: int) -> int:
        return self._call("count_records", device_id=device_id)

    @contextlib.contextmanager
    def device_records(
        self, device_id: int, *, best_only: bool = False, unsound: bool = False
    ) -> Iterator[DeviceRecords]:
        """Whole, in one answer: a device with more than ``MAX_DEVICE_RECORDS`` records is refused by the server."""
        workloads, records = self._call("device_records", device_id=device_id, best_only=best_only, unsound=unsound)
        if any(r.workload_id not in workloads for r in records):
            raise RemoteError(
                f"{self.url}{PATH}/device_records: a record of a workload the answer lacks (is this a registry server?)"
            )
        yield DeviceRecords(workloads, iter(records))

    def tuning_state(self, workload_id: int, device_id: int) -> TuningState:
        return self._call("tuning_state", workload_id=workload_id, device_id=device_id)

    def donor_records(self, workload_ids: Sequence[int], per_device: int, target_kind: str) -> list[DonorRecord]:
        return self._call(
            "donor_records", workload_ids=list(workload_ids), per_device=per_device, target_kind=target_kind
        )

    def ok_record_counts(self, device_id: int) -> dict[int, tuple[str, int]]:
        return self._call("ok_record_counts", device_id=device_id)

    def latest_predictor(self, device_id: int, kind: str | None = None) -> StoredPredictor | None:
        return self._call("latest_predictor", device_id=device_id, kind=kind)

    def record_provenance(self, record_id: int) -> RecordProvenance:
        return self._call("record_provenance", record_id=record_id)

    def donor_rows(self, record_ids: Sequence[int]) -> dict[int, DonorRow]:
        return self._call("donor_rows", record_ids=list(record_ids))

    def indexed_set(self) -> IndexedSet:
        return self._call("indexed_set")

    def indexed_embeddings(self) -> list[tuple[int, bytes]]:
        return self._call("indexed_embeddings")

    def efforts(self, workload_ids: Sequence[int], device_id: int) -> dict[int, Effort]:
        """The server's efforts on the workloads asked for, read as a database's stored ones are: one that fails its
        checks (``effort_problem``) is left out, and a lease that does not end within ``MAX_LEASE_S`` (and the clocks'
        slack) counts as none, so that no run waits for ever on a server's word."""
        found = self._call("efforts", workload_ids=list(workload_ids), device_id=device_id)
        asked, latest = set(workload_ids), dt.datetime.now(dt.UTC) + dt.timedelta(seconds=MAX_LEASE_S + CLOCK_SLACK_S)
        out = {}
        for wid, e in found.items():
            if wid not in asked or effort_problem(e.trials, e.seconds, e.curve, e.plateau):
                continue
            if e.lease_until is not None and not (e.lease_until.tzinfo is not None and e.lease_until <= latest):
                e = dataclasses.replace(e, holder=None, lease_until=None)
            out[wid] = dataclasses.replace(e, holder=None if e.holder is None else printable(e.holder, MAX_NAME))
        return out

    # -- Verification: re-measured here, kept nowhere ------------------------------------------------------------

    def count_imported(self, device_id: int, model: str | None = None) -> int:
        return self._call("count_imported", device_id=device_id, model=model)

    def imported_ids(self, device_id: int, model: str | None, limit: int | None) -> list[int]:
        return self._call("imported_ids", device_id=device_id, model=model, limit=limit)

    def claims(self, record_ids: Sequence[int]) -> list[Claim]:
        return self._call("claims", record_ids=list(record_ids))

    def record_verdicts(self, found: Sequence[Verdict], at: Any) -> None:
        """Kept nowhere: a verdict a client sent would be one more claim, so the server keeps only those measured
        where it runs; `registry --db URL verify` reports what it measured (``verified`` records of that run)."""

    def close(self) -> None:
        """Nothing to give back: each read is one request."""


def open_served(url: str, token: str | None) -> RestStorage:
    """The registry served at ``url`` (a page's address pasted from a browser is understood), read with ``token``."""
    if not url.startswith(("http://", "https://")):
        raise BadInputError(f"{url[:100]!r} is not an http:// or https:// URL of a registry server")
    return RestStorage(url, token)
