"""``registry export``: one device's records as a JSONDatabase that plain TVM loads. No TVM needed."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from registry import tvmlog
from registry.bundle import BundleInfo, write_bundle
from registry.errors import UnknownDeviceError
from registry.store import queries
from registry.store.exchange import ExchangeFilters, read_exchange
from registry.store.lookup import DeviceRow
from registry.store.models import BestRecord, TuningRecord
from registry.store.store import Store


@dataclass
class ExportResult:
    device: str
    workloads: int
    records: int


def export_database(store: Store, folder: Path, device: str | None, *, best_only: bool = False) -> ExportResult:
    """Write ``folder/database_{workload,tuning_record}.json`` for one device.

    Plain TVM's JSONDatabase ignores the target when it answers a query, so one export holds one device only;
    ``device`` may be omitted when the registry knows exactly one.
    """
    dev = _pick_device(store, device)
    with store.read(snapshot=True) as conn:  # records committed meanwhile must not refer to unlisted workloads
        target = json.loads(dev.target_json)
        if best_only:
            wl_ids = select(BestRecord.workload_id).where(BestRecord.device_id == dev.id)
        else:
            wl_ids = select(TuningRecord.workload_id).where(TuningRecord.device_id == dev.id).distinct()
        ids = sorted(conn.execute(wl_ids).scalars())
        workloads = queries.workloads_by_id(conn, ids) if ids else {}
        index = {wid: i for i, wid in enumerate(ids)}
        records = (
            (index[r.workload_id], [json.loads(r.trace_json), r.run_secs, target, workloads[r.workload_id].args_info])
            for r in queries.device_records(conn, dev.id, best_only=best_only)
        )
        n = tvmlog.write_database(folder, [(workloads[i].shash, workloads[i].mod_json) for i in ids], records)
    return ExportResult(device=f"{dev.id}:{dev.name}", workloads=len(ids), records=n)


def _pick_device(store: Store, selector: str | None) -> DeviceRow:
    if selector is not None:
        return store.resolve_one_device(selector)
    all_devices = store.all_devices()
    if len(all_devices) == 1:
        return all_devices[0]
    if not all_devices:
        raise UnknownDeviceError("the registry holds no records yet; nothing to export")
    names = ", ".join(f"{d.id}:{d.name}" for d in all_devices)
    raise UnknownDeviceError(f"the registry holds several devices ({names}); choose one with --device")


def exchange_filters(
    store: Store, device: str | None, team: str | None, model: str | None, since: dt.datetime | None
) -> ExchangeFilters:
    """The filters of a bundle export or a sync, ``device`` resolved to device keys (None: every device)."""
    keys = None
    if device is not None:
        keys = tuple(sorted(d.key for d in store.resolve_devices(device)))
    return ExchangeFilters(device_keys=keys, team=team, model=model, since=since)


def export_bundle(store: Store, path: Path, filters: ExchangeFilters) -> BundleInfo:
    """Write the records matching ``filters``, with their provenance, workloads, devices and models, to ``path``."""
    with store.read(snapshot=True) as conn:
        exchange = read_exchange(conn.connection(), filters)
        described = {k: v for k, v in dataclasses.asdict(filters).items() if v is not None}
        if filters.since is not None:
            described["since"] = filters.since.isoformat()
        return write_bundle(path, exchange, described)
