"""Writing an ``ExchangeSet`` (a bundle's content, or another registry's records) into a registry, every part checked.

Nothing the sender says is taken on trust but provenance: workload hashes are recomputed from their modules (which
must be of this TVM release), devices are rebuilt from their targets, every trace is replayed by ``RecordChecker``,
and every record arrives "imported" (unless it was measured here in the first place). Records keep their origin, so
two registries' measurements of one schedule are both kept; re-reading the same set adds nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
from sqlalchemy import Connection, select, tuple_, update

from registry import hostinfo
from registry.bundle import read_bundle
from registry.errors import BadInputError
from registry.store import ingest
from registry.store.exchange import ExchangeSet, ExRecord
from registry.store.ingest import trace_hash
from registry.store.models import Device, TuningRecord
from registry.store.rows import DeviceSpec, IngestResult, RecordIn, WorkloadIn, canonical_json
from registry.store.store import Store
from registry.tvm_side.checked_ingest import Batch, Progress, checked_write
from registry.tvm_side.log_import import checked_workload
from registry.tvm_side.record_check import RecordChecker
from registry.tvm_side.target import canonical_target
from registry.validation import Problem


def import_exchange(
    store: Store,
    exchange: ExchangeSet,
    *,
    where: str,
    skip_invalid: bool = False,
    progress: Progress | None = None,
    after: Callable[[Connection, IngestResult], None] | None = None,
) -> IngestResult:
    """Write ``exchange`` into ``store`` in one transaction; ``where`` names its source in messages.

    ``after(conn, result)`` runs last, in the same transaction.
    """
    checker = RecordChecker()
    checker.pool.start()  # a replay worker's TVM import, overlapping the workload checks
    progress = progress or (lambda _done, _total, _what: None)
    progress(0, exchange.n_records, f"checking {len(exchange.workloads)} workloads")
    workloads = {w.ident: checked_workload(f"{where}: workload {w.shash}", w.mod_json) for w in exchange.workloads}
    devices = {d.key: _device(d, where) for d in exchange.devices}
    insts = {h: (text, _json(text, f"{where}: skeleton {h}")) for h, text in exchange.skeletons.items()}
    donors: list[tuple[RecordIn, tuple]] = []  # transferred records and their donors' identities

    def batches() -> Iterator[Batch]:
        donors.clear()
        for chunk in exchange.records():
            batch = [(f"{where}: record {r.source_id}", _record(r, workloads, devices, insts)) for r in chunk]
            for r, (_, rec) in zip(chunk, batch, strict=True):
                if r.donor is not None and isinstance(rec, RecordIn):
                    donors.append((rec, r.donor))
            yield batch

    def finish(conn: Connection, ids: dict[tuple[str, str], int], result: IngestResult) -> None:
        local = {ident: ids[w.ident] for ident, w in workloads.items()}
        for m in exchange.models:
            tasks = {local[ident]: (task, weight) for ident, task, weight in m.tasks if ident in local}
            ingest.upsert_model(conn, m.name, m.sha256, m.input_shapes, tasks)
        _link_donors(conn, donors, local)
        if after is not None:
            after(conn, result)

    unique = list({w.ident: w for w in workloads.values()}.values())
    result = checked_write(
        store, unique, batches, checker=checker, skip_invalid=skip_invalid, progress=progress,
        total=exchange.n_records, after=finish,
    )  # fmt: skip
    return result


def _json(text: str, where: str):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise BadInputError(f"{where}: not JSON ({e})") from None


def _device(d, where: str) -> DeviceSpec:
    ours = hostinfo.tvm_version()
    if hostinfo.release(d.tvm_version) != ours:
        raise BadInputError(
            f"{where}: records measured with TVM {d.tvm_version}, but this registry runs TVM {ours}; schedules and "
            "hashes do not carry across TVM releases"
        )
    spec = DeviceSpec(canonical_target(d.target), int(d.num_threads), str(d.host_model), ours)
    if spec.key != d.key:  # the sender's description and identity disagree: a tampered or foreign device
        raise BadInputError(f"{where}: device {d.key[:12]} does not match its own description")
    return spec


def _record(
    r: ExRecord,
    workloads: dict[tuple[str, str], WorkloadIn],
    devices: dict[str, DeviceSpec],
    insts: dict[str, tuple[str, list]],
) -> RecordIn | Problem:
    workload, device, skeleton = workloads.get(r.workload), devices.get(r.device_key), insts.get(r.skeleton)
    if workload is None or device is None or skeleton is None:
        return Problem("refers to a workload, device or instruction list the set does not hold", trace=False)
    try:
        decisions = orjson.loads(r.decisions_json)
    except orjson.JSONDecodeError:
        return Problem("its decisions are not JSON")
    return RecordIn(
        workload=workload.ident,
        device=device,
        trace=[skeleton[1], decisions],
        insts_json=skeleton[0],
        run_secs=tuple(r.run_secs),
        source=r.source,
        tool_version=r.tool_version,
        team=r.team,
        model=r.model,
        host=r.host,
        origin=r.origin,
        trust="imported",
        created_at=r.created_at,
    )


def _chunks(iterable, n):
    it = iter(iterable)
    while chunk := list(itertools.islice(it, n)):
        yield chunk


def _link_donors(conn: Connection, donors: list[tuple[RecordIn, tuple]], local: dict[tuple[str, str], int]) -> None:
    """Point transferred records at their donors, found by identity, where both are stored here."""
    if not donors:
        return
    here = ingest.registry_id(conn)
    keys = {r.device.key for r, _ in donors} | {d[1] for _, d in donors}
    device_ids = dict(conn.execute(select(Device.key, Device.id).where(Device.key.in_(keys))).all())
    links = []
    for rec, (d_workload, d_device, d_hash, d_origin) in donors:
        wid, did = local.get(rec.workload), device_ids.get(rec.device.key)
        d_wid, d_did = local.get(d_workload), device_ids.get(d_device)
        if None in (wid, did, d_wid, d_did):
            continue  # the donor's workload or device is not stored here: the record keeps its provenance only
        trace = trace_hash(f"[{rec.insts_json},{canonical_json(rec.trace[1])}]")
        links.append(((wid, did, trace, rec.origin or here), (d_wid, d_did, d_hash, d_origin)))
    _set_donors(conn, links)


def _set_donors(conn: Connection, links: list[tuple[tuple, tuple]]) -> int:
    """``links``: ((workload id, device id, trace hash, origin) of a record, the same of its donor), local ids.
    Sets each record's donor where both are stored and it has none yet; returns how many were set."""
    done = 0
    key = tuple_(TuningRecord.workload_id, TuningRecord.device_id, TuningRecord.trace_hash, TuningRecord.origin)
    for chunk in _chunks(links, 200):
        wanted = {k for pair in chunk for k in pair}
        found = dict(
            ((w, d, h, o), i)
            for i, w, d, h, o in conn.execute(
                select(
                    TuningRecord.id,
                    TuningRecord.workload_id,
                    TuningRecord.device_id,
                    TuningRecord.trace_hash,
                    TuningRecord.origin,
                ).where(key.in_(list(wanted)))
            )
        )
        for rec, donor in chunk:
            if rec in found and donor in found:
                conn.execute(
                    update(TuningRecord)
                    .where(TuningRecord.id == found[rec], TuningRecord.donor_record_id.is_(None))
                    .values(donor_record_id=found[donor])
                )
                done += 1
    return done


def import_bundle(
    store: Store, path: Path, *, skip_invalid: bool = False, progress: Progress | None = None
) -> IngestResult:
    """``registry import BUNDLE``: checksums first, then everything as ``import_exchange`` checks it."""
    exchange, _manifest = read_bundle(path)
    return import_exchange(store, exchange, where=str(path), skip_invalid=skip_invalid, progress=progress)
