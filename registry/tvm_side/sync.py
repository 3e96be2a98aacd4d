"""``registry sync``: one registry's records into another, incrementally, with their provenance.

The source is read in one snapshot (``registry.store.exchange``) and written into the destination as a bundle is
(``exchange_import``): checked, in one transaction, keeping every record's origin. The destination remembers, per
source registry and filter set, the highest source record id it has copied (``sync_state``); the next sync reads only
records above it. Record ids only grow, so that finds every record added since, with one caveat on PostgreSQL: a
transaction still open in the source while a sync reads it may commit records with lower ids afterwards, which the
next sync then skips; `--full` reads everything again (re-reading adds nothing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Connection, select

from registry.errors import BadInputError
from registry.store import ingest
from registry.store.engine import redact
from registry.store.exchange import ExchangeFilters, read_exchange
from registry.store.models import SyncState
from registry.store.rows import IngestResult
from registry.store.store import Store
from registry.tvm_side.checked_ingest import Progress
from registry.tvm_side.exchange_import import import_exchange


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
    src: Store,
    dst: Store,
    filters: ExchangeFilters,
    *,
    full: bool = False,
    skip_invalid: bool = False,
    progress: Progress | None = None,
) -> SyncResult:
    start = time.perf_counter()
    with src.read(snapshot=True) as session:
        conn = session.connection()
        src_id = ingest.registry_id(conn)
        dst_id = dst.transact(ingest.registry_id)
        if src_id == dst_id:
            raise BadInputError("the source and the destination are the same registry; nothing to sync")
        key = filters.key()
        after_id = 0 if full else _last_synced(dst, src_id, key)
        exchange = read_exchange(conn, filters, after_id=after_id)

        def remember(conn: Connection, _result: IngestResult) -> None:
            stmt = ingest.insert(conn, SyncState).values(
                source_id=src_id, filters_key=key, last_record_id=exchange.last_record_id
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["source_id", "filters_key"],
                    set_=dict(last_record_id=stmt.excluded.last_record_id, synced_at=stmt.excluded.synced_at),
                )
            )

        result = import_exchange(
            dst, exchange, where=redact(src.url), skip_invalid=skip_invalid, progress=progress, after=remember
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


def _last_synced(dst: Store, source_id: str, key: str) -> int:
    with dst.read() as session:
        found = session.execute(
            select(SyncState.last_record_id).where(SyncState.source_id == source_id, SyncState.filters_key == key)
        ).scalar()
    return found or 0
