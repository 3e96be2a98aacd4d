"""``registry sync``: one registry's records into another, incrementally, with their provenance.

The source is read in one snapshot (``RegistryStorage.read_exchange``) and written into the destination as a bundle
is (``exchange_import``): checked, in one transaction, keeping every record's origin. The destination remembers, per
source registry and filter set, the highest source record id it has copied (its ``sync_state``, written in the same
transaction); the next sync reads only records above it. Record ids only grow, so that finds every record added
since, with one caveat on PostgreSQL: a transaction still open in the source while a sync reads it may commit records
with lower ids afterwards, which the next sync then skips; `--full` reads everything again (re-reading adds nothing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from registry.errors import BadInputError
from registry.records.write import Progress
from registry.share.exchange_import import import_exchange
from registry.store.interface import RegistryStorage
from registry.store.urls import redact
from registry.store.values import ExchangeFilters


@dataclass
class SyncResult:
    source: str
    destination: str
    incremental: bool  # whether an earlier sync of this pair and filter set let this one skip records
    records_read: int
    records_new: int
    records_present: int
    records_skipped: int
    workloads_new: int
    models: int
    seconds: float


def sync(
    src: RegistryStorage,
    dst: RegistryStorage,
    filters: ExchangeFilters,
    *,
    full: bool = False,
    skip_invalid: bool = False,
    progress: Progress | None = None,
) -> SyncResult:
    start = time.perf_counter()
    src_id = src.registry_id()
    if src_id == dst.registry_id():
        raise BadInputError("the source and the destination are the same registry; nothing to sync")
    key = filters.key()
    after_id = 0 if full else dst.last_synced(src_id, key)
    with src.read_exchange(filters, after_id) as exchange:
        result = import_exchange(
            dst,
            exchange,
            where=redact(src.url),
            skip_invalid=skip_invalid,
            progress=progress,
            sync_mark=(src_id, key, exchange.last_record_id),
        )
    return SyncResult(
        source=redact(src.url),
        destination=redact(dst.url),
        incremental=after_id > 0,
        records_read=exchange.n_records,
        records_new=result.records_new,
        records_present=result.records_present,
        records_skipped=result.records_skipped,
        workloads_new=result.workloads_new,
        models=len(exchange.models),
        seconds=time.perf_counter() - start,
    )
