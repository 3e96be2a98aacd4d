"""``registry export``: one device's records as a JSONDatabase that plain TVM loads, with records for the kernels plain
TVM extracts (``registry.share.plain_export``, which imports TVM only where a stored model has such kernels)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import itertools
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from registry.errors import BadInputError, RegistryWarning, UnknownDeviceError
from registry.share.bundle import PREDICTOR_KINDS, BundleInfo, predictor_problem, write_bundle
from registry.share.plain_export import PlainRecords, plain_records, readme
from registry.store.decode import parse
from registry.store.interface import Catalogue, DeviceRow, RegistryReads, RegistryStorage, Sharing
from registry.store.own_files import refuse_own_file
from registry.store.values import ExchangeFilters, ExchangeSet, ExDevice, ExPredictor
from registry.tvm_side import tvmlog


@dataclass
class ExportResult:
    device: str
    workloads: int
    records: int
    plain_kernels: int = 0  # kernels plain TVM extracts differently from the registry, without a record of their own
    plain_records: int = 0  # of those, how many got the registry's schedule replayed on them
    plain_unusable: list[str] = dataclasses.field(default_factory=list)  # task names of the rest


def export_database(
    store: RegistryReads, folder: Path, device: str | None, *, best_only: bool = False, replay_plain: bool = True
) -> ExportResult:
    """Write ``folder/database_{workload,tuning_record}.json`` for one device.

    Plain TVM's JSONDatabase ignores the target when it answers a query, so one export holds one device only;
    ``device`` may be omitted when exactly one device holds records. ``replay_plain``: also replay the registry's
    schedules on the kernels plain TVM extracts otherwise (``plain_records``), in this process: not for a served
    registry's traces, which are its claims.
    """
    dev = _pick_device(store, device)
    target = parse(dev.target_json, f"device {dev.id}'s target")
    plain = plain_records(store, dev.id, target) if replay_plain else PlainRecords()
    with store.device_records(dev.id, best_only=best_only) as found:
        workloads = dict(found.workloads)
        workloads.update({w.id: w for w in plain.workloads if w.id not in workloads})
        index = {wid: i for i, wid in enumerate(workloads)}
        stored = (
            (index[r.workload_id], [json.loads(r.trace_json), r.run_secs, target, workloads[r.workload_id].args_info])
            for r in found.records
        )
        replayed = (
            (index[wid], [trace, run_secs, target, workloads[wid].args_info]) for wid, trace, run_secs in plain.records
        )
        n = tvmlog.write_database(
            folder, [(w.shash, w.mod_json) for w in workloads.values()], itertools.chain(stored, replayed)
        )
    if plain.kernels or plain.records:
        (folder / "README.md").write_text(readme(str(folder), plain), encoding="utf-8")
    return ExportResult(
        device=f"{dev.id}:{dev.name}", workloads=len(workloads), records=n, plain_kernels=plain.kernels,
        plain_records=len(plain.records), plain_unusable=plain.unusable,
    )  # fmt: skip


def _pick_device(store: RegistryReads, selector: str | None) -> DeviceRow:
    """The device ``selector`` names, else the one device with records (a device may hold only a predictor: the
    starter bundle's AVX2 one)."""
    if selector is not None:
        return store.resolve_one_device(selector)
    with_records = [d for d in store.all_devices() if store.count_records(d.id)]
    if len(with_records) == 1:
        return with_records[0]
    if not with_records:
        raise UnknownDeviceError("the registry holds no records yet; nothing to export")
    names = ", ".join(f"{d.id}:{d.name}" for d in with_records)
    raise UnknownDeviceError(f"the registry holds records of several devices ({names}); choose one with --device")


def exchange_filters(
    store: Catalogue,
    device: str | None,
    team: str | None,
    model: str | None,
    since: dt.datetime | None,
    best_only: bool = False,
) -> ExchangeFilters:
    """The filters of a bundle export or a sync, ``device`` resolved to device keys (None: every device)."""
    keys = None
    if device is not None:
        keys = tuple(sorted(d.key for d in store.resolve_devices(device)))
    return ExchangeFilters(device_keys=keys, team=team, model=model, since=since, best_only=best_only)


MAX_NAMED = 10  # names a refusal lists, each cut to 40 characters


def refuse_unmatched(store: RegistryStorage, filters: ExchangeFilters) -> None:
    """Raise BadInputError, before anything is sent or written, when a team, model or device filter of a push
    matches no record here: a misspelt team would otherwise push nothing and succeed. The line names the filter
    that matches nothing alone (or all of them, together) and what this registry holds."""
    blamed = unmatched(store, filters)
    if len(blamed) == 1:
        field = blamed[0]
        known = held(store, field, "`registry devices` lists the devices")
        raise BadInputError(f"no record of {_named(field, getattr(filters, field))} in this registry to push ({known})")
    if blamed:
        together = " and ".join(_named(field, getattr(filters, field)) for field in blamed)
        raise BadInputError(f"no record in this registry matches {together} together; nothing to push")


def unmatched(store: Sharing, filters: ExchangeFilters) -> list[str]:
    """The filters to blame when no record matches ``filters`` (``since`` aside: nothing new since a time is no
    mistake): the one of team, model and device_keys that matches nothing alone, else all that were given (they
    match only apart); [] when some record matches or none of them was given."""
    given = [field for field in ("team", "model", "device_keys") if getattr(filters, field) is not None]
    if not given or _any_record(store, dataclasses.replace(filters, since=None)):
        return []
    for field in given:
        if len(given) == 1 or not _any_record(store, ExchangeFilters(**{field: getattr(filters, field)})):
            return [field]
    return given


def _named(field: str, value: str | tuple | None) -> str:
    return "the device(s) given" if field == "device_keys" else f"{field} {value[:60]!r}"


def _any_record(store: Sharing, filters: ExchangeFilters) -> bool:
    with store.read_exchange(filters, 0, 1) as found:
        return found.n_records > 0


def held(store: Catalogue, what: str, devices: str) -> str:
    """What this registry holds of ``what`` (team or model), at most ``MAX_NAMED`` names, each escaped and cut;
    ``devices`` for device_keys (where the reader lists them)."""
    if what == "device_keys":
        return devices
    if what == "team":
        names = [t.team for t in store.stats().by_team if t.team is not None]
        label = "teams with records lately"
    else:
        names, label = store.model_names(MAX_NAMED + 1), "models"
    if not names:
        return f"{label}: none"
    more = ", ..." if len(names) > MAX_NAMED else ""
    return f"{label}: " + ", ".join(repr(n[:40]) for n in names[:MAX_NAMED]) + more


def export_bundle(
    store: RegistryStorage,
    path: Path,
    filters: ExchangeFilters,
    *,
    predictors: bool = True,
    predictor_devices: tuple[str, ...] = (),
) -> BundleInfo:
    """Write the records matching ``filters``, with their provenance, workloads, devices and models, to ``path``;
    with ``predictors``, each of those devices' newest predictor of each kind that travels too, and those of the
    devices keyed in ``predictor_devices``, which travel for their predictors alone (the starter bundle's predictor of
    a device class it holds no records of). Raises BadInputError when ``path`` is the registry's own file (it would be
    replaced) or cannot be written."""
    refuse_own_file(path, [store.url], "--bundle")
    with store.read_exchange(filters) as exchange:
        if predictors:
            known = {d.key for d in exchange.devices}
            exchange.devices += [
                ExDevice(d.key, parse(d.target_json, f"device {d.id}'s target"), d.num_threads, d.host_model,
                         d.tvm_version)
                for d in store.all_devices() if d.key in predictor_devices and d.key not in known
            ]  # fmt: skip
            exchange.predictors = lambda: newest_predictors(store, exchange)
        return write_bundle(path, exchange, filters.described())


def newest_predictors(store: RegistryStorage, exchange: ExchangeSet) -> Iterator[ExPredictor]:
    """The newest predictor of each kind in ``bundle.PREDICTOR_KINDS`` of each device of ``exchange``, one at a
    time. Its metrics say which registry trained it ("origin": this one, unless it came from another) and leave out
    per_workload, whose workload ids are this registry's own. One an import would refuse is left out with a
    warning: a corrupt stored predictor never stops an export."""
    ids = {d.key: (d.id, d.name) for d in store.all_devices()}
    for device in exchange.devices:
        if device.key not in ids:
            continue
        device_id, name = ids[device.key]
        for kind in PREDICTOR_KINDS:
            stored = store.latest_predictor(device_id, kind)
            if stored is None:
                continue
            metrics = stored.metrics
            if isinstance(metrics, dict):
                metrics = {"origin": exchange.origin} | {k: v for k, v in metrics.items() if k != "per_workload"}
            p = ExPredictor(device.key, kind, stored.tvm_version, stored.n_workloads, stored.n_records, metrics,
                            stored.blob, hashlib.sha256(stored.blob).hexdigest())  # fmt: skip
            problem = predictor_problem(p)
            if problem:
                warnings.warn(
                    f"predictor v{stored.version} of device {device_id}:{name} is left out of the bundle: {problem}",
                    RegistryWarning,
                    stacklevel=2,
                )
                continue
            yield p
