"""``Store``: the registry's library API over one database. Every write is one transaction: all of it or nothing."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from registry.config import resolve_database_url
from registry.errors import BadInputError, NoRegistryError
from registry.perf import paused_gc
from registry.store import values
from registry.store.rows import DeviceSpec, IngestExtras, IngestResult, RecordIn, WorkloadIn
from registry.store.sql import lookup, model_history, predictors, queries, schema, sqlite_file
from registry.store.sql.engine import WRITE, create, translated_errors, with_retries
from registry.store.sql.trust import DEFAULT_TRUST, accepted
from registry.store.sql.write_behind import write_behind
from registry.store.validation import Problem, Refusals, record_problems
from registry.store.values import DeviceRow, ExchangeFilters, ExchangeSet, LookupFilter, LookupRow

T = TypeVar("T")

# Writes of at least this many records refresh the planner's statistics (see Store.after_bulk_write).
BULK = 1000


class Store:
    """A registry database: the SQL implementation of ``registry.store.interface.RegistryStorage``.

    ``url`` is any SQLAlchemy URL (default: ``$REGISTRY_DATABASE_URL``, else the per-user SQLite file). An empty
    database is migrated on first use; one at an older schema revision raises SchemaOutdatedError naming
    `registry db upgrade`.

    Example::

        store = Store("sqlite:///team.db")
        rows = store.lookup(LookupFilter(op="conv2d", top_k=3))
    """

    def __init__(
        self, url: str | None = None, *, check_schema: bool = True, create_new: bool = True, trust: str = DEFAULT_TRUST
    ) -> None:
        """``create_new=False``: open only an existing registry, creating nothing (no file, folder or lock file, no
        tables): a missing SQLite file or an empty database raises NoRegistryError.

        ``trust``: which records compilation and tuning read from it (``registry.store.sql.trust``)."""
        accepted(trust)  # refuses an unknown one
        self.trust = trust
        self.url = resolve_database_url(url)
        if not create_new:
            missing = sqlite_file.missing(self.url)
            if missing:
                raise NoRegistryError(missing)
        self.engine = create(self.url)
        self.created = False  # whether opening it created the registry's tables (see drop_if_unused)
        if check_schema:
            with translated_errors(self.url):
                self.created = schema.ensure_current(self.engine, create=create_new)

    def close(self) -> None:
        self.engine.dispose()

    def drop_if_unused(self) -> bool:
        """After a refused write into a database that opening this store set up: drop the registry's tables again
        if nothing was stored, so that the database is as it was (empty). True when they were dropped."""
        if not self.created:
            return False
        with translated_errors(self.url, writing=True):
            return schema.drop_if_unused(self.engine)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[Session]:
        """A read-only session (rolled back, never committed).

        ``snapshot``: every statement sees the same committed state, even while others write. SQLite's WAL gives a
        read transaction that already; PostgreSQL needs REPEATABLE READ for it.
        """
        engine = self.engine
        if snapshot and engine.dialect.name == "postgresql":
            engine = engine.execution_options(isolation_level="REPEATABLE READ")
        with translated_errors(self.url), Session(engine) as session:
            yield session

    def transact(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one write transaction, again from the start if it lost a lock race."""

        def attempt() -> T:
            with self.engine.execution_options(**{WRITE: True}).begin() as conn:
                return fn(conn)

        with translated_errors(self.url, writing=True):
            return with_retries(attempt)

    # -- writes -------------------------------------------------------------------------------------------------

    def ingest(
        self,
        workloads: Sequence[WorkloadIn],
        records: Sequence[RecordIn],
        *,
        check: Callable[[Sequence[RecordIn]], list[Problem | None]] | None = None,
    ) -> IngestResult:
        """Add workloads and records; those already present are counted, not duplicated.

        Every record is checked first, by ``check`` (default ``registry.store.validation.record_problems``: latencies,
        trace shape, each decision against its instruction; no TVM). ``RegistryDatabase`` passes a
        ``registry.records.validator.RecordValidator``'s, which also replays traces on their workloads. One invalid
        record refuses the whole call with BadInputError ("N of M records ...") before anything is written.
        """
        refusals = Refusals()
        for i, problem in enumerate((check or record_problems)(records)):
            if problem is not None:
                refusals.add(f"record {i + 1}", problem)
        if refusals.count:
            raise BadInputError(refusals.message(len(records)))
        return self.ingest_batches(workloads, lambda: [records])

    def ingest_batches(
        self,
        workloads: Sequence[WorkloadIn],
        batches: Callable[[], Iterable[Sequence[RecordIn]]],
        extras: IngestExtras | None = None,
    ) -> IngestResult:
        """Add ``workloads``, then every batch of records ``batches()`` yields, in one transaction.

        For ``registry import``: a log of millions of records streams through in little memory, and the caller checks
        each batch itself as it reads it (these records are not checked here). Anything ``batches`` raises, such as
        a refusal found in the last batch, leaves the database as it was. It is called again, from the start, when
        the transaction lost a lock race, so each call must yield the same records.
        """
        from registry.store.sql import ingest

        def write(conn: Connection) -> IngestResult:
            result = IngestResult()
            here = ingest.registry_id(conn)
            wl_ids = ingest.upsert_workloads(conn, workloads, result)
            device_ids: dict[str, int] = {}

            def write_batch(batch: ingest.PreparedRecords) -> None:
                new_devices = [spec for key, spec in batch.devices.items() if key not in device_ids]
                device_ids.update(ingest.upsert_devices(conn, new_devices))
                missing = batch.workloads - wl_ids.keys()
                if missing:
                    wl_ids.update(ingest.workload_ids(conn, list(missing)))
                ingest.insert_records(conn, batch, wl_ids, device_ids, result)

            # Each batch is stored while the next is read, checked and made rows (a third of a sync's time, before).
            write_behind((ingest.prepare_records(records, here) for records in batches()), write_batch)
            if extras is not None:
                from registry.store.sql.exchange import write_extras

                write_extras(conn, extras, wl_ids)
            return result

        with paused_gc():
            result = self.transact(write)
        self.after_bulk_write(result.records_new)
        return result

    def keep_faster(self, records: Sequence[RecordIn]) -> list[bool]:
        """Records measured here that are already stored: each one's measurement replaces the stored one where it
        is faster (``ingest.keep_faster``). True per record that replaced one."""
        from registry.store.sql import ingest

        return self.transact(lambda conn: ingest.keep_faster(conn, records, ingest.registry_id(conn)))

    def after_bulk_write(self, n_records: int) -> None:
        """Refresh the query planner's statistics after a large write.

        Without them SQLite guesses that ``device_id = ?`` is selective and scans a device's every workload to find
        one hash: measured 1.5 ms instead of 0.05 ms per lookup at 10^6 records. ``analysis_limit`` bounds the work
        to a sample, so this costs milliseconds.
        """
        if n_records < BULK:
            return
        with translated_errors(self.url), self.engine.connect() as conn:
            if self.engine.dialect.name == "sqlite":
                conn.exec_driver_sql("PRAGMA analysis_limit=1000")
                conn.exec_driver_sql("ANALYZE")
            elif self.engine.dialect.name == "postgresql":
                conn.exec_driver_sql("ANALYZE workload, workload_arg, best_record, tuning_record")
            conn.commit()

    def record_model(
        self,
        name: str,
        sha256: str,
        input_shapes: dict[str, list[int]],
        tasks: Sequence[tuple[WorkloadIn, str, int]],
        plain: Sequence[tuple[WorkloadIn, str, int]] = (),
    ) -> int:
        """Record a model and its tasks as (workload, task name, weight); the workloads are added if new. ``plain``:
        its kernels as plain TVM extracts them, where they differ."""
        from registry.store.sql import ingest

        def write(conn: Connection) -> int:
            ids = ingest.upsert_workloads(conn, [w for w, _, _ in [*tasks, *plain]], IngestResult())
            by_id = {ids[w.ident]: (task, weight) for w, task, weight in tasks}
            plain_by_id = {ids[w.ident]: (task, weight) for w, task, weight in plain}
            return ingest.upsert_model(conn, name, sha256, input_shapes, by_id, plain_by_id)

        return self.transact(write)

    def device_id(self, spec: DeviceSpec) -> int:
        from registry.store.sql import ingest

        return self.transact(lambda conn: ingest.upsert_devices(conn, [spec])[spec.key])

    # -- sharing: identity, exchange sets, sync progress ---------------------------------------------------------

    def registry_id(self) -> str:
        """This registry's id: the origin stamped on what it measures."""
        from registry.store.sql.ingest import registry_id

        with self.read() as conn:
            return registry_id(conn.connection())

    @contextlib.contextmanager
    def read_exchange(
        self, filters: ExchangeFilters, after_id: int = 0, limit: int | None = None
    ) -> Iterator[ExchangeSet]:
        """The records matching ``filters`` above ``after_id`` (the first ``limit`` of them), with what they refer
        to, read in one snapshot that stays open while the set's records are read."""
        from registry.store.sql.exchange import read_exchange

        with self.read(snapshot=True) as conn:
            yield read_exchange(conn.connection(), filters, after_id=after_id, limit=limit)

    def last_synced(self, source_id: str, filters_key: str) -> int:
        from registry.store.sql.exchange import last_synced

        with self.read() as conn:
            return last_synced(conn.connection(), source_id, filters_key)

    # -- the tokens of `registry serve` -------------------------------------------------------------------------

    def add_token(self, name: str, role: str, digest: str, expires_at: dt.datetime | None = None) -> None:
        from registry.store.sql import tokens

        self.transact(lambda conn: tokens.add(conn, name, role, digest, expires_at))

    def tokens(self) -> list[values.TokenRow]:
        from registry.store.sql import tokens

        with self.read() as conn:
            return tokens.all_tokens(conn.connection())

    def revoke_token(self, name: str) -> bool:
        from registry.store.sql import tokens

        return self.transact(lambda conn: tokens.revoke(conn, name))

    def token(self, digest: str) -> values.TokenRow | None:
        from registry.store.sql import tokens

        with self._reading() as conn:  # every request to the server asks this: one round trip
            return tokens.by_digest(conn, digest)

    # -- effort and leases of tuning runs (registry.pipeline.effort) ---------------------------------------------

    def efforts(self, workload_ids: Sequence[int], device_id: int) -> dict[int, values.Effort]:
        from registry.store.sql import efforts

        with self._reading() as conn:
            return efforts.efforts(conn, workload_ids, device_id)

    def take_task(self, workload_id: int, device_id: int, holder: str, lease_s: float) -> str | None:
        from registry.store.sql import efforts

        return self.transact(lambda conn: efforts.take(conn, workload_id, device_id, holder, lease_s))

    def renew_tasks(self, holder: str, lease_s: float) -> int:
        from registry.store.sql import efforts

        return self.transact(lambda conn: efforts.renew(conn, holder, lease_s))

    def save_effort(
        self,
        workload_id: int,
        device_id: int,
        holder: str,
        added: tuple[int, float],
        curve: Sequence[tuple[int, float]],
        plateau: bool,
        lease_s: float | None,
    ) -> bool:
        from registry.store.sql import efforts

        return self.transact(
            lambda conn: efforts.save(conn, workload_id, device_id, holder, added, curve, plateau, lease_s)
        )

    def release_tasks(self, holder: str) -> int:
        from registry.store.sql import efforts

        return self.transact(lambda conn: efforts.release(conn, holder))

    # -- registry verify ----------------------------------------------------------------------------------------

    def count_imported(self, device_id: int, model: str | None = None) -> int:
        """The imported ok records of a device (and model): what ``registry verify`` may re-measure."""
        from registry.store.sql import verdicts

        with self.read() as conn:
            return verdicts.count_imported(conn, device_id, model)

    def imported_ids(self, device_id: int, model: str | None, limit: int | None) -> list[int]:
        from registry.store.sql import verdicts

        with self.read() as conn:
            return verdicts.imported_ids(conn, device_id, model, limit)

    def claims(self, record_ids: Sequence[int]) -> list[values.Claim]:
        from registry.store.sql import verdicts

        with self.read() as conn:
            return verdicts.claims(conn, record_ids)

    def record_verdicts(self, found: Sequence[values.Verdict], at) -> None:
        """Mark records verified or disputed, with what was measured, and choose their pairs' best records again."""
        from registry.store.sql import verdicts

        self.transact(lambda conn: verdicts.record_verdicts(conn, found, at))

    # -- reads --------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def sql(self) -> Iterator[lookup.Sql]:
        """The engine's DB-API connection, for the plain-SQL read path shared with the CLI."""
        with self._reading() as conn:
            raw = conn.connection.dbapi_connection
            yield lookup.Sql(raw, "pyformat" if self.engine.dialect.name == "postgresql" else "named")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A connection for a few independent reads. On PostgreSQL it runs without a transaction: a BEGIN and a
        ROLLBACK are two round trips of the four a short read would take, and a server answering lookups makes
        several such reads per request (docs/BENCHMARKS.md, "Serving over HTTP")."""
        with translated_errors(self.url), self.engine.connect() as conn:
            if self.engine.dialect.name == "postgresql":
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn

    def lookup(self, f: LookupFilter) -> list[LookupRow]:
        with self.sql() as sql:
            return lookup.lookup(sql, f)

    def resolve_devices(self, selector: str) -> list[DeviceRow]:
        with self.sql() as sql:
            return lookup.resolve_devices(sql, selector)

    def resolve_one_device(self, selector: str) -> DeviceRow:
        with self.sql() as sql:
            return lookup.resolve_one_device(sql, selector)

    def all_devices(self) -> list[DeviceRow]:
        with self.sql() as sql:
            return lookup.all_devices(sql)

    def stats(self) -> dict:
        with self.read() as conn:
            return queries.stats(conn)

    def newest_record_id(self) -> int:
        with self.sql() as sql:
            return sql.all("SELECT max(id) FROM tuning_record")[0][0] or 0

    def devices(self) -> list[dict]:
        with self.read() as conn:
            return queries.devices(conn)

    def record_provenance(self, record_id: int) -> values.RecordProvenance:
        """A record with its trace, workload module and provenance (source, donor, team, model, host, time)."""
        with self.read() as conn:
            return queries.record_provenance(conn, record_id)

    # -- schema (RegistryStorage) -------------------------------------------------------------------------------

    def schema_revision(self) -> str | None:
        with translated_errors(self.url), self.engine.connect() as conn:
            return schema.current_revision(conn)

    def upgrade_schema(self) -> tuple[str | None, str | None]:
        with translated_errors(self.url):
            return schema.upgrade(self.engine)

    # -- workloads and records, as TVM needs them back (RegistryStorage) ----------------------------------------

    def workload_ids(self, idents: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        from registry.store.sql import ingest

        with self.read() as conn:
            return ingest.workload_ids(conn, idents)

    def workloads_by_id(self, ids: Sequence[int]) -> dict[int, values.StoredWorkload]:
        if not ids:
            return {}
        with self.read() as conn:
            return queries.workloads_by_id(conn, list(ids))

    def top_k(self, workload_id: int, device_id: int, k: int) -> list[values.StoredRecord]:
        """The ``k`` preferred records this store's ``trust`` accepts (measured here or verified first)."""
        with self.read() as conn:
            return queries.top_k(conn, workload_id, device_id, k, self.trust)

    def count_records(self, device_id: int) -> int:
        with self.read() as conn:
            return queries.count_records(conn, device_id)

    @contextlib.contextmanager
    def device_records(
        self, device_id: int, *, best_only: bool = False, unsound: bool = False
    ) -> Iterator[values.DeviceRecords]:
        """The records stream from an open snapshot: use them inside the ``with`` block."""
        with self.read(snapshot=True) as conn:
            ids = queries.device_workload_ids(conn, device_id, best_only=best_only)
            found = queries.workloads_by_id(conn, ids) if ids else {}  # a corrupt one is left out, with a warning
            records = queries.device_records(conn, device_id, best_only=best_only, unsound=unsound)
            if unsound:
                lost = "the registry's copy of its workload cannot be read"
                records = (r if r.workload_id in found else replace(r, trace_json="", problem=lost) for r in records)
            else:
                records = (r for r in records if r.workload_id in found)
            yield values.DeviceRecords(found, records)

    def tuning_state(self, workload_id: int, device_id: int) -> values.TuningState:
        with self.read() as conn:
            return queries.tuning_state(conn, workload_id, device_id)

    def donor_records(self, workload_ids: Sequence[int], per_device: int, target_kind: str) -> list[values.DonorRecord]:
        with self.read() as conn:
            return queries.donor_records(conn, list(workload_ids), per_device, target_kind)

    def ok_record_counts(self, device_id: int) -> dict[int, tuple[str, int]]:
        with self.read() as conn:
            return queries.ok_record_counts(conn, device_id)

    # -- predictors (RegistryStorage) ----------------------------------------------------------------------------
    # registry.store.sql.predictors holds their SQL; its functions take the store first, so they serve as methods as is.

    save_predictor = predictors.save_predictor
    latest_predictor = predictors.latest_predictor
    list_predictors = predictors.list_predictors

    # -- the similarity index (RegistryStorage) ------------------------------------------------------------------

    def indexed_set(self) -> values.IndexedSet:
        with self.read() as conn:
            return queries.indexed_set(conn)

    def indexed_embeddings(self) -> list[tuple[int, bytes]]:
        with self.read() as conn:
            return queries.indexed_embeddings(conn)

    # -- models and their history (RegistryStorage) --------------------------------------------------------------

    def find_models(self, selector: str, sha256: str | None = None) -> list[values.ModelRow]:
        with self.read() as conn:
            return model_history.find_models(conn, selector, sha256)

    def model_names(self, limit: int = 10) -> list[str]:
        with self.read() as conn:
            return model_history.model_names(conn, limit)

    def plain_tasks(self) -> list[values.PlainTask]:
        with self.read() as conn:
            return model_history.plain_tasks(conn)

    def model_tasks(self, model_id: int) -> list[values.TaskRow]:
        with self.read() as conn:
            return model_history.model_tasks(conn, model_id)

    def busiest_device(self, workload_ids: Sequence[int]) -> tuple[int, str] | None:
        with self.read() as conn:
            return model_history.busiest_device(conn, workload_ids)

    def record_history(self, workload_ids: Sequence[int], device_id: int) -> values.RecordHistory:
        with self.read() as conn:
            return model_history.record_history(conn, workload_ids, device_id)

    def donor_rows(self, record_ids: Sequence[int]) -> dict[int, values.DonorRow]:
        with self.read() as conn:
            return model_history.donors(conn, record_ids)
