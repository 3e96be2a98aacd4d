"""``GET /api/v1/storage/{read}?args=JSON``: the storage's reads over HTTP, for ``registry --db http://...``
(``registry.share.rest_storage.RestStorage``, its client): the catalogue, the browsing reads, the record reads (an
overlay's shared side: ``registry transfer|tune --db URL``), efforts, with a lease's end but not its holder, and
the imported records ``registry --db URL verify`` re-measures (at most ``MAX_ITEMS`` ids a read). A reader's token,
as every read of the API. ``device_records`` comes whole, refused above ``MAX_DEVICE_RECORDS``.

The arguments are the read's keyword arguments as JSON, checked against the protocol method's annotations and
bounded (``bounded``) before the storage sees them; the answer is the read's value as JSON
(``rest_storage.encode``). Nothing here writes.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from registry.server.api import MAX_ROWS, known_query
from registry.server.problems import HttpProblem, responses
from registry.server.state import Storage, reader
from registry.share.rest_storage import MAX_DEVICE_RECORDS, READS, WireError, decode, encode, read_of
from registry.store.trust import TRUST_CHOICES
from registry.store.values import BROWSE_SORTS, IMPORTED_EFFORT, BrowseFilter, Effort, LookupFilter

MAX_ARGS = 16 << 10  # characters of a read's arguments: a model's workload ids, with room to spare
MAX_TEXT = 1000  # characters of one name or filter
MAX_ITEMS = 10_000  # items of one list of ids
MAX_ID = 2**62
HELD = "another run"  # a lease's holder as a read by URL names it: some run's, not whose
COUNTS = ("k", "per_device", "limit")  # arguments that say how many records come back: at most MAX_ITEMS

router = APIRouter(prefix="/api/v1", dependencies=[Depends(known_query), Depends(reader)])


@router.get(
    "/storage/{read}", tags=["registry"], operation_id="readStorage", responses=responses(404, 422),
    response_class=Response,
)  # fmt: skip
def storage_read(
    store: Storage,
    read: str,
    args: Annotated[str, Query(max_length=MAX_ARGS, description="The read's keyword arguments, as JSON.")] = "{}",
):
    """One read of the registry's storage (``registry.store.interface``: the catalogue, the browsing reads, a
    record's provenance, donors and efforts) with ``args``, its keyword arguments; the answer is its value as JSON.
    What `registry --db http://...` reads through."""
    if read not in READS:
        raise HttpProblem(404, f"no storage read {read[:40]!r}; the reads: {', '.join(sorted(READS))}")
    kwargs = _arguments(read, args)
    if read == "device_records":
        value = _device_records(store, **kwargs)
    else:
        value = getattr(store, read)(**kwargs)
    if read == "workload_ids":  # JSON's keys are text: (ident, id) pairs travel instead
        value = list(value.items())
    if read == "efforts":  # how hard a task was searched, not which run (host:pid) holds its lease now
        value = {k: _unheld(e) for k, e in value.items()}
    return Response(encode(value), media_type="application/json")


def _unheld(e: Effort) -> Effort:
    """An effort as a reader sees it: how hard its task was searched, and until when a run holds its lease, not which
    run (host:pid): ``HELD`` in its place, so that a tuning run by URL waits for the lease instead of asking for it
    at every poll. An effort another registry claimed stays marked so (``IMPORTED_EFFORT``), which a run counts as
    none."""
    if e.holder == IMPORTED_EFFORT:
        return dataclasses.replace(e, lease_until=None)
    held = e.holder is not None and e.lease_until is not None
    return dataclasses.replace(e, holder=HELD if held else None, lease_until=e.lease_until if held else None)


def _device_records(store, device_id: int, best_only: bool = False, unsound: bool = False) -> tuple:
    """A device's records and their workloads, whole: refused (422) for a device with more than
    ``MAX_DEVICE_RECORDS``, which a client pulls (`registry pull`) instead of reading in one answer."""
    count = store.count_records(device_id)
    if count > MAX_DEVICE_RECORDS:
        raise HttpProblem(
            422,
            f"device {device_id} has {count} records, more than the {MAX_DEVICE_RECORDS} one read hands out: "
            "`registry pull URL` them into a local registry instead",
        )
    with store.device_records(device_id, best_only=best_only, unsound=unsound) as found:
        return found.workloads, list(found.records)


def _arguments(read: str, text: str) -> dict[str, Any]:
    """The read's keyword arguments from ``text``, checked against its annotations and bounded; 422 otherwise."""
    try:
        given = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise HttpProblem(422, "args: not JSON") from None
    if type(given) is not dict:
        raise HttpProblem(422, "args: not a JSON object")
    params, _ = read_of(read)
    defaults = inspect.signature(READS[read]).parameters
    unknown = [k for k in given if k not in params]
    if unknown:
        raise HttpProblem(422, f"args: {read} takes no {unknown[0][:40]!r} (it takes {', '.join(params) or 'none'})")
    if read == "imported_ids" and given.get("limit") is None:  # every imported record of a device: unbounded
        raise HttpProblem(422, f"args: imported_ids needs a limit (at most {MAX_ITEMS}) by URL")
    kwargs = {}
    for name, tp in params.items():
        if name not in given:
            if defaults[name].default is inspect.Parameter.empty:
                raise HttpProblem(422, f"args: {read} needs {name!r}")
            continue
        try:
            kwargs[name] = bounded(decode(given[name], tp, name), name)
            if name in COUNTS and not 0 <= kwargs[name] <= MAX_ITEMS:  # how many records the answer may hold
                raise WireError(f"{name} is not between 0 and {MAX_ITEMS}")
        except WireError as e:
            raise HttpProblem(422, f"args: {e}") from None
    return kwargs


def bounded(value: Any, where: str) -> Any:
    """``value`` if each name in it is at most ``MAX_TEXT`` characters, each id within ``MAX_ID``, each list at most
    ``MAX_ITEMS`` long and a lookup's window as ``registry lookup`` allows it; WireError otherwise."""
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise WireError(f"{where} is longer than {MAX_TEXT} characters")
    if isinstance(value, int) and not isinstance(value, bool) and not -MAX_ID <= value <= MAX_ID:
        raise WireError(f"{where} is out of range")
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_ITEMS:
            raise WireError(f"{where} has more than {MAX_ITEMS} items")
        for i, item in enumerate(value):
            bounded(item, f"{where}[{i}]")
    if isinstance(value, LookupFilter):
        for f in dataclasses.fields(value):
            bounded(getattr(value, f.name), f"{where}.{f.name}")
        if not (1 <= value.limit <= MAX_ROWS and 1 <= value.top_k <= 100 and 0 <= value.offset <= 2**31):
            raise WireError(f"{where}: limit, top_k or offset is out of range")
        if value.trust not in TRUST_CHOICES:
            raise WireError(f"{where}.trust is none of {', '.join(TRUST_CHOICES)}")
        if isinstance(value, BrowseFilter) and value.sort not in BROWSE_SORTS:
            raise WireError(f"{where}.sort is none of {', '.join(BROWSE_SORTS)}")
    return value
