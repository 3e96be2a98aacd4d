"""``Store``: the registry's library API over one database. Every write is one transaction: all of it or nothing."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TypeVar

from sqlalchemy import Connection, func, select

from registry.config import resolve_database_url
from registry.errors import BadInputError, NoRegistryError
from registry.perf import paused_gc
from registry.store import values
from registry.store.interface import (
    Administration,
    Batches,
    Browsing,
    Catalogue,
    Check,
    Extras,
    LeaseStorage,
    RecordReads,
    RecordWrites,
    Sharing,
    Tokens,
    Verification,
    Workloads,
)
from registry.store.rows import DeviceSpec, IngestResult, ModelIn, RecordIn
from registry.store.sql import (
    browse,
    efforts,
    exchange,
    ingest,
    lookup,
    model_history,
    predictors,
    queries,
    roles,
    schema,
    sqlite_file,
    tokens,
    verdicts,
)
from registry.store.sql.engine import WRITE, create, translated_errors, with_retries
from registry.store.sql.models import TuningRecord
from registry.store.sql.revision import HEAD
from registry.store.sql.write_behind import write_behind
from registry.store.trust import DEFAULT_TRUST, accepted
from registry.store.urls import redact
from registry.store.validation import Refusals, record_problems
from registry.store.values import DeviceRow, EffortUpdate, ExchangeFilters, ExchangeSet, LookupFilter, LookupRow

T = TypeVar("T")

# Writes of at least this many records refresh the planner's statistics (see Store.after_bulk_write).
BULK = 1000


class Store(
    RecordReads, RecordWrites, LeaseStorage, Tokens, Sharing, Verification, Catalogue, Browsing, Administration
):
    """A registry database: the SQL implementation of every protocol of ``registry.store.interface``.

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
    def read(self, *, snapshot: bool = False) -> Iterator[Connection]:
        """A connection to read through, never committed: the one way this store reads (``transact`` writes).

        On PostgreSQL a plain read runs without a transaction, each statement seeing what is committed when it runs
        (as at READ COMMITTED): a BEGIN and a ROLLBACK are two round trips of the four a short read would take, and a
        server answering lookups makes several reads per request (docs/BENCHMARKS.md, "Serving over HTTP").
        ``snapshot``: every statement sees the same committed state, even while others write. SQLite's WAL gives a
        read transaction that already; PostgreSQL needs REPEATABLE READ for it.
        """
        with translated_errors(self.url), self.engine.connect() as conn:
            if self.engine.dialect.name == "postgresql":
                conn = conn.execution_options(isolation_level="REPEATABLE READ" if snapshot else "AUTOCOMMIT")
            yield conn

    def transact(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one write transaction, again from the start if it lost a lock race: the one way this store
        writes."""

        def attempt() -> T:
            with self.engine.execution_options(**{WRITE: True}).begin() as conn:
                return fn(conn)

        with translated_errors(self.url, writing=True):
            return with_retries(attempt)

    # -- writes -------------------------------------------------------------------------------------------------

    def ingest(self, workloads: Workloads, records: Sequence[RecordIn], *, check: Check = None) -> IngestResult:
        """Add workloads and records; those already present are counted, not duplicated.

        Every record is checked first, by ``check`` (default ``registry.store.validation.record_problems``: latencies,
        trace shape, each decision against its instruction; no TVM). Callers that replay traces on
        their workloads validate through ``registry.records.write`` instead. One invalid
        record refuses the whole call with BadInputError ("N of M records ...") before anything is written.
        """
        refusals = Refusals()
        for i, problem in enumerate((check or record_problems)(records)):
            if problem is not None:
                refusals.add(f"record {i + 1}", problem)
        if refusals.count:
            raise BadInputError(refusals.message(len(records)))
        return self.ingest_batches(workloads, lambda: [records])

    def ingest_batches(self, workloads: Workloads, batches: Batches, extras: Extras = None) -> IngestResult:
        """Add ``workloads``, then every batch of records ``batches()`` yields, in one transaction.

        For ``registry import``: a log of millions of records streams through in little memory, and the caller checks
        each batch itself as it reads it (these records are not checked here). Anything ``batches`` raises, such as
        a refusal found in the last batch, leaves the database as it was. It is called again, from the start, when
        the transaction lost a lock race, so each call must yield the same records.
        """

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

            # Each batch is stored while the next is read, checked and made rows (see write_behind).
            write_behind((ingest.prepare_records(records, here) for records in batches()), write_batch)
            if extras is not None:
                exchange.write_extras(conn, extras, wl_ids)
            return result

        with paused_gc():
            result = self.transact(write)
        self.after_bulk_write(result.records_new)
        return result

    def keep_faster(self, records: Sequence[RecordIn]) -> list[bool]:
        """Records measured here that are already stored: each one's measurement replaces the stored one where it
        is faster (``ingest.keep_faster``). True per record that replaced one."""
        return self.transact(lambda conn: ingest.keep_faster(conn, records, ingest.registry_id(conn)))

    def after_bulk_write(self, n_records: int) -> None:
        """Refresh the query planner's statistics after a large write.

        Without them SQLite guesses that ``device_id = ?`` is selective and scans a device's every workload to find
        one hash: measured 1.5 ms instead of 0.05 ms per lookup at 10^6 records. ``analysis_limit`` bounds the work
        to a sample, so this costs milliseconds.
        """
        if n_records < BULK:
            return
        self.transact(_analyze)

    def save_model(self, model: ModelIn) -> int:
        """Store a model and its tasks; their workloads are added if new."""

        def write(conn: Connection) -> int:
            ids = ingest.upsert_workloads(conn, [w for w, _, _ in [*model.tasks, *model.plain]], IngestResult())
            by_id = {ids[w.ident]: (task, weight) for w, task, weight in model.tasks}
            plain_by_id = {ids[w.ident]: (task, weight) for w, task, weight in model.plain}
            return ingest.upsert_model(conn, model.name, model.sha256, model.input_shapes, by_id, plain_by_id)

        return self.transact(write)

    def add_device(self, spec: DeviceSpec) -> int:
        return self.transact(lambda conn: ingest.upsert_devices(conn, [spec])[spec.key])

    # -- sharing: identity, exchange sets, sync progress ---------------------------------------------------------

    def registry_id(self) -> str:
        """This registry's id: the origin stamped on what it measures."""
        with self.read() as conn:
            return ingest.registry_id(conn)

    @contextlib.contextmanager
    def read_exchange(
        self, filters: ExchangeFilters, after_id: int = 0, limit: int | None = None
    ) -> Iterator[ExchangeSet]:
        """The records matching ``filters`` above ``after_id`` (the first ``limit`` of them), with what they refer
        to, read in one snapshot that stays open while the set's records are read."""
        with self.read(snapshot=True) as conn:
            yield exchange.read_exchange(conn, filters, after_id=after_id, limit=limit)

    def last_synced(self, source_id: str, filters_key: str) -> int:
        with self.read() as conn:
            return exchange.last_synced(conn, source_id, filters_key)

    # -- the tokens of `registry serve` -------------------------------------------------------------------------

    def add_token(self, name: str, role: str, digest: str, expires_at: dt.datetime | None = None) -> None:
        self.transact(lambda conn: tokens.add(conn, name, role, digest, expires_at))

    def tokens(self) -> list[values.TokenRow]:
        with self.read() as conn:
            return tokens.all_tokens(conn)

    def revoke_token(self, name: str) -> bool:
        return self.transact(lambda conn: tokens.revoke(conn, name))

    def token(self, digest: str) -> values.TokenRow | None:
        with self.read() as conn:  # every request to the server asks this: one round trip
            return tokens.by_digest(conn, digest)

    # -- effort and leases of tuning runs (registry.pipeline.effort) ---------------------------------------------

    def efforts(self, workload_ids: Sequence[int], device_id: int) -> dict[int, values.Effort]:
        with self.read() as conn:
            return efforts.efforts(conn, workload_ids, device_id)

    def take_task(self, workload_id: int, device_id: int, holder: str, lease_s: float) -> str | None:
        return self.transact(lambda conn: efforts.take(conn, workload_id, device_id, holder, lease_s))

    def renew_tasks(self, holder: str, lease_s: float) -> int:
        return self.transact(lambda conn: efforts.renew(conn, holder, lease_s))

    def save_effort(self, update: EffortUpdate) -> bool:
        return self.transact(lambda conn: efforts.save(conn, update))

    def release_tasks(self, holder: str) -> int:
        return self.transact(lambda conn: efforts.release(conn, holder))

    def release_leases(self, model: str | None, may_run: Callable[[str], bool]) -> tuple[int, dict[str, int]]:
        return self.transact(lambda conn: efforts.release_leases(conn, model, may_run))

    # -- registry verify ----------------------------------------------------------------------------------------

    def count_imported(self, device_id: int, model: str | None = None) -> int:
        """The imported ok records of a device (and model): what ``registry verify`` may re-measure."""
        with self.read() as conn:
            return verdicts.count_imported(conn, device_id, model)

    def imported_ids(self, device_id: int, model: str | None, limit: int | None) -> list[int]:
        with self.read() as conn:
            return verdicts.imported_ids(conn, device_id, model, limit)

    def claims(self, record_ids: Sequence[int]) -> list[values.Claim]:
        with self.read() as conn:
            return verdicts.claims(conn, record_ids)

    def record_verdicts(self, found: Sequence[values.Verdict], at) -> None:
        """Mark records verified or disputed, with what was measured, and choose their pairs' best records again."""
        self.transact(lambda conn: verdicts.record_verdicts(conn, found, at))

    # -- reads --------------------------------------------------------------------------------------------------

    def lookup(self, f: LookupFilter) -> list[LookupRow]:
        with self.read() as conn:
            return lookup.lookup(lookup.Sql.under(conn), f)

    def resolve_devices(self, selector: str) -> list[DeviceRow]:
        with self.read() as conn:
            return lookup.resolve_devices(lookup.Sql.under(conn), selector)

    def resolve_one_device(self, selector: str) -> DeviceRow:
        with self.read() as conn:
            return lookup.resolve_one_device(lookup.Sql.under(conn), selector)

    def all_devices(self) -> list[DeviceRow]:
        with self.read() as conn:
            return lookup.all_devices(lookup.Sql.under(conn))

    def stats(self) -> values.RegistryStats:
        with self.read() as conn:
            return queries.stats(conn)

    def newest_record_id(self) -> int:
        with self.read() as conn:
            return conn.execute(select(func.max(TuningRecord.id))).scalar() or 0

    def devices(self) -> list[values.DeviceListing]:
        with self.read() as conn:
            return queries.devices(conn)

    def record_provenance(self, record_id: int) -> values.RecordProvenance:
        """A record with its trace, workload module and provenance (source, donor, team, model, host, time)."""
        with self.read() as conn:
            return queries.record_provenance(conn, record_id)

    # -- schema (RegistryStorage) -------------------------------------------------------------------------------

    def schema_revision(self) -> str | None:
        with self.read() as conn:
            return schema.current_revision(conn)

    def upgrade_schema(self) -> tuple[str | None, str | None]:
        with translated_errors(self.url):
            return schema.upgrade(self.engine)

    def schema_head(self) -> str:
        return HEAD

    def grant_role(self, role: str, access: str) -> values.RoleGrant:
        self._refuse_roles_on_sqlite()
        roles.check_name(role)
        place, statements = self.transact(lambda conn: roles.grant(conn, role, access))
        return values.RoleGrant(place.database, place.schema, place.owner, ";\n".join(statements) + ";\n")

    def grant_script(self, role: str, access: str) -> values.RoleGrant:
        self._refuse_roles_on_sqlite()
        roles.check_name(role)
        database = self.engine.url.database
        if not database:  # printed, not run: the URL is the only place its name can come from
            raise BadInputError(f"{redact(self.url)} names no database; --print-sql needs one to grant CONNECT on")
        return values.RoleGrant(database, "public", None, roles.script(role, access, database))

    def _refuse_roles_on_sqlite(self) -> None:
        if self.engine.dialect.name != "postgresql":
            raise BadInputError(f"{redact(self.url)} is not PostgreSQL: an SQLite registry has no roles")

    # -- workloads and records, as TVM needs them back (RegistryStorage) ----------------------------------------

    def workload_ids(self, idents: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
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

    # -- predictors ------------------------------------------------------------------------------------------------

    def save_predictor(self, predictor: values.PredictorIn) -> int:
        return self.transact(lambda conn: predictors.save(conn, predictor))

    def latest_predictor(self, device_id: int, kind: str | None = None) -> values.StoredPredictor | None:
        with self.read() as conn:
            return predictors.latest(conn, device_id, kind)

    def list_predictors(self, device_id: int | None = None) -> list[values.PredictorInfo]:
        with self.read() as conn:
            return predictors.all_predictors(conn, device_id)

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

    def plain_tasks(self) -> list[values.PlainTaskRow]:
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

    # -- Browsing: the web view's reads

    def coverage(self, model_id: int) -> list[values.DeviceCoverage]:
        with self.read() as conn:
            return browse.coverage(conn, model_id)

    def default_latencies(self, workload_ids: Sequence[int], device_id: int) -> dict[int, float]:
        with self.read() as conn:
            return browse.default_latencies(conn, workload_ids, device_id)

    def workload_hashes(self, workload_ids: Sequence[int]) -> dict[int, str]:
        with self.read() as conn:
            return browse.workload_hashes(conn, workload_ids)

    def browse(self, f: values.BrowseFilter) -> values.BrowsePage:
        with self.read() as conn:
            return browse.browse(conn, f)

    def donor_rows(self, record_ids: Sequence[int]) -> dict[int, values.DonorRow]:
        with self.read() as conn:
            return model_history.donors(conn, record_ids)


def _analyze(conn: Connection) -> None:
    """Refresh the query planner's statistics of the tables lookups and compilation read."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("PRAGMA analysis_limit=1000")
        conn.exec_driver_sql("ANALYZE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql("ANALYZE workload, workload_arg, best_record, tuning_record")
