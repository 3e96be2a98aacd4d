"""``Store``: the registry's library API over one database. Every write is one transaction: all of it or nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from registry.config import resolve_database_url
from registry.errors import BadInputError, NoRegistryError
from registry.perf import paused_gc
from registry.store import lookup, queries, schema, sqlite_file
from registry.store.engine import WRITE, create, translated_errors, with_retries
from registry.store.rows import DeviceSpec, IngestResult, RecordIn, WorkloadIn
from registry.store.trust import DEFAULT_TRUST, accepted
from registry.validation import Problem, Refusals, record_problems

T = TypeVar("T")

# Writes of at least this many records refresh the planner's statistics (see Store.after_bulk_write).
BULK = 1000


class Store:
    """A registry database.

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

        ``trust``: which records compilation and tuning read from it (``registry.store.trust``)."""
        accepted(trust)  # refuses an unknown one
        self.trust = trust
        self.url = resolve_database_url(url)
        if not create_new:
            missing = sqlite_file.missing(self.url)
            if missing:
                raise NoRegistryError(missing)
        self.engine = create(self.url)
        if check_schema:
            with translated_errors(self.url):
                schema.ensure_current(self.engine, create=create_new)

    def close(self) -> None:
        self.engine.dispose()

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

        Every record is checked first, by ``check`` (default ``registry.validation.record_problems``: latencies,
        trace shape, each decision against its instruction; no TVM). ``RegistryDatabase`` passes a
        ``registry.tvm_side.record_check.RecordChecker``'s, which also replays traces on their workloads. One invalid
        record refuses the whole call with BadInputError ("N of M records ...") before anything is written.
        """
        from registry.store import ingest

        refusals = Refusals()
        for i, problem in enumerate((check or record_problems)(records)):
            if problem is not None:
                refusals.add(f"record {i + 1}", problem)
        if refusals.count:
            raise BadInputError(refusals.message(len(records)))

        def write(conn: Connection) -> IngestResult:
            result = IngestResult()
            device_ids = ingest.upsert_devices(conn, (r.device for r in records))
            wl_ids = ingest.upsert_workloads(conn, workloads, result)
            missing = {r.workload for r in records} - wl_ids.keys()
            wl_ids.update(ingest.workload_ids(conn, list(missing)))
            ingest.insert_records(conn, records, wl_ids, device_ids, result)
            return result

        with paused_gc():
            result = self.transact(write)
        self.after_bulk_write(result.records_new)
        return result

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
    ) -> int:
        """Record a model and its tasks as (workload, task name, weight); the workloads are added if new."""
        from registry.store import ingest

        def write(conn: Connection) -> int:
            ids = ingest.upsert_workloads(conn, [w for w, _, _ in tasks], IngestResult())
            by_id = {ids[w.ident]: (task, weight) for w, task, weight in tasks}
            return ingest.upsert_model(conn, name, sha256, input_shapes, by_id)

        return self.transact(write)

    def device_id(self, spec: DeviceSpec) -> int:
        from registry.store import ingest

        return self.transact(lambda conn: ingest.upsert_devices(conn, [spec])[spec.key])

    # -- reads --------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def sql(self) -> Iterator[lookup.Sql]:
        """The engine's DB-API connection, for the plain-SQL read path shared with the CLI."""
        with translated_errors(self.url), self.engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            yield lookup.Sql(raw, "pyformat" if self.engine.dialect.name == "postgresql" else "named")

    def lookup(self, f: lookup.LookupFilter) -> list[lookup.LookupRow]:
        with self.sql() as sql:
            return lookup.lookup(sql, f)

    def resolve_devices(self, selector: str) -> list[lookup.DeviceRow]:
        with self.sql() as sql:
            return lookup.resolve_devices(sql, selector)

    def resolve_one_device(self, selector: str) -> lookup.DeviceRow:
        with self.sql() as sql:
            return lookup.resolve_one_device(sql, selector)

    def all_devices(self) -> list[lookup.DeviceRow]:
        with self.sql() as sql:
            return lookup.all_devices(sql)

    def stats(self) -> dict:
        with self.read() as conn:
            return queries.stats(conn)

    def devices(self) -> list[dict]:
        with self.read() as conn:
            return queries.devices(conn)

    def record_provenance(self, record_id: int) -> queries.RecordProvenance:
        """A record with its trace, workload module and provenance (source, donor, team, model, host, time)."""
        with self.read() as conn:
            return queries.record_provenance(conn, record_id)
