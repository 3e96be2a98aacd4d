"""TVM's own database tests, run against ``registry.database()`` on SQLite and PostgreSQL.

The cases are those of Apache TVM's ``tests/python/meta_schedule/test_meta_schedule_database.py`` (Apache-2.0),
written again here against the registry's factory instead of ``JSONDatabase``/``MemoryDatabase``: the same modules
(a 1024x1024 matmul and a 16x16 matmul+relu), the same hand-written schedule, the same latencies. TVM 0.27 spells
things differently (``tvm.s_tir.meta_schedule``, ``T.sblock``, targets as JSON only), so ``Target("llvm")`` becomes
the database's own ``db.target``. Each TVM test maps to one here:

=========================================  =======================================================================
TVM's test                                 here
=========================================  =======================================================================
tuning_record_round_trip                   same contract
database_create                            skipped: JSONDatabase's two files
database_has_workload                      same contract
database_add_entry                         same contract
database_missing                           same contract
database_sorting                           differs: one record per trace, the fastest kept (and sorting across
                                           traces checked as TVM checks it across records)
database_reload                            differs the same way; what a new database on the same URL answers
database_union                             same contract, over two devices of one registry
pydatabase_default_query                   same contract, except that the empty trace is refused
pydatabase_override_query                  skipped: a user's PyDatabase overriding ``query_*``
pydatabase_current                         same contract
memory_database_get_top_k (k 0, 1, 4, 5)   differs: two of its latency lists are refused, one record per trace;
json_database_get_top_k (k 0, 4, 5)        the same case, so run once per k
{json,memory}_database_commit_workload     "structural": same contract; "ignore-tensor" and "anchor-block":
                                           skipped, the registry keys workloads by structural hash only
=========================================  =======================================================================

Where the registry differs, the test asserts what ``RegistryDatabase``'s docstring (and docs/ARCHITECTURE.md, "TVM
integration") says it does instead.
"""

from __future__ import annotations

import logging

import pytest
import tvm
import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.script import tirx as T

import registry
from registry.errors import RegistryError
from registry.records.database import RecordRefusedError
from registry.store.sql.store import Store
from registry.store.urls import redact
from registry.store.values import LookupFilter

pytestmark = pytest.mark.tvm


@T.prim_func(s_tir=True)
def _matmul(a: T.Buffer((1024, 1024), "float32"), b: T.Buffer((1024, 1024), "float32"),
            c: T.Buffer((1024, 1024), "float32")):  # fmt: skip
    for i, j, k in T.grid(1024, 1024, 1024):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                c[vi, vj] = T.float32(0)
            c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]


@T.prim_func(s_tir=True)
def _matmul_relu(a: T.Buffer((16, 16), "float32"), b: T.Buffer((16, 16), "float32"),
                 d: T.Buffer((16, 16), "float32")):  # fmt: skip
    c = T.sblock_alloc_buffer((16, 16), "float32")
    for i, j, k in T.grid(16, 16, 16):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                c[vi, vj] = T.float32(0)
            c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]
    for i, j in T.grid(16, 16):
        with T.sblock("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            d[vi, vj] = T.max(c[vi, vj], T.float32(0))


MATMUL = tvm.IRModule({"main": _matmul})
MATMUL_RELU = tvm.IRModule({"main": _matmul_relu})
# TVM's schedule splits i by [1, 1, 2, 512]; the others tile i otherwise, to make distinct traces of the same shape.
I_TILES = ([1, 1, 2, 512], [1, 1, 4, 256], [1, 2, 2, 256], [2, 1, 2, 256], [1, 1, 8, 128], [1, 1, 1, 1024],
           [4, 1, 1, 256])  # fmt: skip


def scheduled(i_tiles=I_TILES[0]) -> Schedule:
    """TVM's ``_schedule_matmul``: i, j and k split and reordered."""
    sch = Schedule(MATMUL, debug_mask="all")
    i, j, k = sch.get_loops(sch.get_sblock("matmul"))
    i0, i1, i2, i3 = sch.split(i, i_tiles)
    j0, j1, j2, j3 = sch.split(j, [1, 512, 1, 2])
    k0, k1 = sch.split(k, [256, 4])
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
    return sch


def record(db, workload, run_secs, trace=None) -> ms.database.TuningRecord:
    trace = trace if trace is not None else scheduled().trace
    args = ms.arg_info.ArgInfo.from_prim_func(workload.mod["main"])
    return ms.database.TuningRecord(trace, workload, run_secs, db.target, args)


def secs(r) -> list[float]:
    return [float(s) for s in r.run_secs]


def assert_same_record(a, b) -> None:
    """TVM's ``_equal_record``."""
    assert str(a.trace) == str(b.trace)
    assert str(a.run_secs) == str(b.run_secs)
    assert str(a.target) == str(b.target)
    tvm.ir.assert_structural_equal(a.workload.mod, b.workload.mod)
    assert [str(x.as_json()) for x in a.args_info] == [str(x.as_json()) for x in b.args_info]


@pytest.fixture
def db(db_url):
    return registry.database(db=db_url, threads=1)


# -- the same contract as TVM's databases ----------------------------------------------------------------------------


def test_tuning_record_round_trip(db):
    workload = db.commit_workload(MATMUL)
    committed = record(db, workload, [T.float32(1.5), T.float32(2.5), T.float32(1.8)])
    db.commit_tuning_record(committed)
    assert_same_record(ms.database.TuningRecord.from_json(committed.as_json(), workload), committed)
    # and as the registry gives it back: float32 latencies, trace and target unchanged
    (stored,) = db.get_top_k(workload, 1)
    assert_same_record(stored, committed)


def test_has_workload(db):
    workload = db.commit_workload(MATMUL)
    db.commit_tuning_record(record(db, workload, [1.5, 2.5, 1.8]))
    assert len(db) == 1
    assert db.has_workload(MATMUL)
    assert not db.has_workload(MATMUL_RELU)


def test_add_entry(db):
    workload = db.commit_workload(MATMUL)
    committed = record(db, workload, [1.5, 2.5, 1.8])
    db.commit_tuning_record(committed)
    assert len(db) == 1
    (found,) = db.get_top_k(workload, 3)
    assert_same_record(found, committed)


def test_missing(db):
    workload = db.commit_workload(MATMUL)
    other = db.commit_workload(MATMUL_RELU)
    db.commit_tuning_record(record(db, workload, [1.5, 2.5, 1.8]))
    assert db.get_top_k(other, 3) == []


def test_union(db_url):
    """TVM's two MemoryDatabases are two devices of one registry here (1 and 2 runtime threads): a registry database
    answers for its own device only."""
    one, two = registry.database(db=db_url, threads=1), registry.database(db=db_url, threads=2)

    def query(d):
        return secs(d.query_tuning_record(mod=MATMUL, target=one.target, workload_name="main"))

    one.commit_tuning_record(record(one, one.commit_workload(MATMUL), [1.0]))
    assert query(one) == [1.0]
    two.commit_tuning_record(record(two, two.commit_workload(MATMUL), [0.5]))
    assert query(two) == [0.5]
    assert query(ms.database.UnionDatabase(one, two)) == [0.5]
    assert query(ms.database.OrderedUnionDatabase(one, two)) == [1.0]


def test_current(db):
    with db:
        assert ms.database.Database.current().same_as(db)


@pytest.mark.parametrize("module_equality", ["structural", "ignore-tensor", "anchor-block"])
def test_commit_workload(db, module_equality):
    if module_equality != "structural":
        pytest.skip(f"module_equality={module_equality!r}: the registry keys workloads by structural hash only")
    workload = db.commit_workload(MATMUL)
    tvm.ir.assert_structural_equal(workload.mod, MATMUL)
    assert db.has_workload(MATMUL)


def test_create():
    pytest.skip("JSONDatabase's two files: a registry is created by opening its URL (tests/test_storage_interface.py)")


def test_override_query():
    pytest.skip("a user's own PyDatabase overriding query_*: RegistryDatabase keeps TVM's default queries")


def test_default_query(db):
    """TVM's queries by kind answer from the registry; its second half commits the empty trace of the unscheduled
    module, which the registry refuses (MetaSchedule writes no such record), so the first record still answers."""
    sch = scheduled()

    def query(kind):
        return db.query(mod=MATMUL, target=db.target, workload_name="main", kind=kind)

    db.commit_tuning_record(record(db, db.commit_workload(MATMUL), [1.0], sch.trace))
    assert secs(query("record")) == [1.0]
    assert tvm_ffi.structural_equal(query("schedule").mod, sch.mod)
    assert tvm_ffi.structural_equal(query("ir_module"), sch.mod)
    assert not tvm_ffi.structural_equal(sch.mod, MATMUL)  # so the checks above tell the two schedules apart

    with pytest.raises(RecordRefusedError, match="its instructions are not a non-empty list; nothing was stored"):
        db.commit_tuning_record(record(db, db.commit_workload(MATMUL), [0.2], Schedule(MATMUL).trace))
    assert secs(query("record")) == [1.0]
    assert tvm_ffi.structural_equal(query("ir_module"), sch.mod)


# -- deliberate differences: one record per trace, the fastest kept -------------------------------------------------

SORTING = [[7.0, 8.0, 9.0], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [1.1, 1.2, 600.0], [1.0, 100.0, 6.0], [4.0, 9.0, 8.0]]


def test_sorting_keeps_the_fastest_measurement_of_one_trace(db, caplog):
    """TVM's case commits one trace six times and expects the two fastest commits back. Here the trace is one
    record, which holds the fastest of its measurements whatever the order they came in; each commit that did not
    replace it is logged."""
    workload = db.commit_workload(MATMUL)
    with caplog.at_level(logging.INFO, logger="registry.records.database"):
        for run_secs in SORTING:
            db.commit_tuning_record(record(db, workload, run_secs))
    assert len(db) == 1
    assert [secs(r) for r in db.get_top_k(workload, 2)] == [[1.0, 2.0, 3.0]]
    said = [r.getMessage() for r in caplog.records]
    assert sum("replaced its stored latencies" in m for m in said) == 1  # [1, 2, 3] over [7, 8, 9]
    assert sum("was not faster than stored: dropped" in m for m in said) == 4
    assert all(redact(db.store.url) in m and db.device.name in m for m in said)


def test_sorting_across_traces(db):
    """TVM's case with a distinct trace per latency list: the two fastest, fastest first, as TVM answers."""
    workload = db.commit_workload(MATMUL)
    for tiles, run_secs in zip(I_TILES, SORTING, strict=False):
        db.commit_tuning_record(record(db, workload, run_secs, scheduled(tiles).trace))
    assert len(db) == len(SORTING)
    top = db.get_top_k(workload, 2)
    assert [secs(r) for r in top] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert str(top[0].trace) == str(scheduled(I_TILES[1]).trace)


def test_reload(db_url):
    """A new database on the same registry answers what was committed through the first one: for TVM's one trace
    committed three times, its fastest measurement."""
    db = registry.database(db=db_url, threads=1)
    workload = db.commit_workload(MATMUL)
    for run_secs in SORTING[:3]:
        db.commit_tuning_record(record(db, workload, run_secs))
    again = registry.database(db=db_url, threads=1)
    assert [secs(r) for r in again.get_top_k(again.commit_workload(MATMUL), 2)] == [[1.0, 2.0, 3.0]]


def test_a_faster_measurement_replaces_a_failed_one_and_the_best_follows(db_url):
    """The registry's own answers (``registry lookup``, compilation's best record) follow the replaced latencies."""
    db = registry.database(db=db_url, threads=1)
    workload = db.commit_workload(MATMUL)
    db.commit_tuning_record(record(db, workload, [1e10]))  # TVM's failed run: stored, never an answer
    assert len(db) == 1 and db.get_top_k(workload, 1) == []
    assert Store(db_url).lookup(LookupFilter(op="matmul")) == []
    db.commit_tuning_record(record(db, workload, [2e-3]))
    db.commit_tuning_record(record(db, workload, [3e-3]))  # slower: the 2 ms stay
    assert len(db) == 1 and [secs(r) for r in db.get_top_k(workload, 1)] == [[2e-3]]
    (row,) = Store(db_url).lookup(LookupFilter(op="matmul"))
    assert (row.latency_us, row.records) == (pytest.approx(2000.0), 1)
    db.commit_tuning_record(record(db, workload, [1e-3]))
    (row,) = Store(db_url).lookup(LookupFilter(op="matmul"))
    assert (row.latency_us, row.records) == (pytest.approx(1000.0), 1)
    db.commit_tuning_record(record(db, workload, [1e10]))  # a failed run after a good one changes nothing
    assert [secs(r) for r in db.get_top_k(workload, 1)] == [[1e-3]]


# -- deliberate differences: what is refused, and how the refusal reads ---------------------------------------------

TOP_K_CASE = [[1.5, 4.5], [], [0.0, 2.0], None, [2.0], [3.0, 1e10], [1e10]]
REFUSED = {2: "latency 0.0 s is not a measurement", 5: "latency 10000000000.0 s is not a measurement"}


@pytest.mark.parametrize("k", [0, 1, 4, 5])
def test_get_top_k(db, k):
    """TVM's case commits one trace seven times; TVM stores all seven and answers the four that are not all failed,
    [0.0, 2.0] first. Here a latency of 0 and a failed run's 1e10 mixed with a real time are refused (not
    measurements), the failed runs are stored but never answered, and the one trace holds its fastest: [2.0]."""
    workload = db.commit_workload(MATMUL)
    for i, run_secs in enumerate(TOP_K_CASE):
        if i in REFUSED:
            with pytest.raises(RecordRefusedError, match=REFUSED[i]):
                db.commit_tuning_record(record(db, workload, run_secs))
        else:
            db.commit_tuning_record(record(db, workload, run_secs))
    assert [secs(r) for r in db.get_top_k(workload, k)] == [[2.0]][:k]


def test_get_top_k_across_traces(db):
    """TVM's case with a distinct trace per latency list: the answers TVM gives, less the two refused lists."""
    workload = db.commit_workload(MATMUL)
    for i, (tiles, run_secs) in enumerate(zip(I_TILES, TOP_K_CASE, strict=True)):
        if i not in REFUSED:
            db.commit_tuning_record(record(db, workload, run_secs, scheduled(tiles).trace))
    assert len(db) == 5  # the three failed runs ([], None, [1e10]) are stored
    assert [secs(r) for r in db.get_top_k(workload, 5)] == [[2.0], [1.5, 4.5]]


def test_a_refused_record_reaches_the_caller_as_a_value_error_that_says_why(db):
    """Through TVM's FFI (as MetaSchedule calls it) a refusal arrives as ``RecordRefusedError``, a ``ValueError``
    and a ``RegistryError``, naming the registry, the device, the workload and the reason; before, a bare
    ``RuntimeError`` said "1 of 1 records refused: ..."."""
    from registry.tvm_side.signature import structural_hash

    workload = db.commit_workload(MATMUL)
    with pytest.raises(RecordRefusedError) as refused:
        db.commit_tuning_record(record(db, workload, [0.0, 2.0]))
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, RegistryError)
    text = str(refused.value)
    assert text.startswith(f"the registry at {redact(db.store.url)}, device {db.device.name}, refused a tuning record")
    assert f"of workload {structural_hash(MATMUL)}: latency 0.0 s is not a measurement" in text
    assert text.endswith("; nothing was stored")
    assert len(db) == 0

    other = ms.database.TuningRecord(scheduled().trace, workload, [1.0], tvm.target.Target({"kind": "llvm"}),
                                     ms.arg_info.ArgInfo.from_prim_func(MATMUL["main"]))  # fmt: skip
    with pytest.raises(ValueError, match="it was measured for target .* tune with the target the database was made"):
        db.commit_tuning_record(other)
    assert len(db) == 0
