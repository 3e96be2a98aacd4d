"""Operator embeddings and the FAISS index: ids are SQL keys, and the index follows the database."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import delete, select

from registry import testing
from registry.cli.main import cli
from registry.similarity.index import SimilarityIndex
from registry.store.embedding import DIM, embed
from registry.store.sql.models import Workload
from registry.store.sql.store import Store


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    dev = testing.device()
    s.ingest([testing.workload(i) for i in range(21)], [testing.record(i, 0, dev) for i in range(21)])
    yield s
    s.close()


def sql_ids(store: Store) -> set[int]:
    with store.read() as s:
        return set(s.execute(select(Workload.id)).scalars())


def test_embeddings_are_stored_with_each_workload(store):
    with store.read() as s:
        for blob in s.execute(select(Workload.embedding)).scalars():
            assert np.frombuffer(blob, dtype=np.float32).shape == (DIM,)


def test_same_operator_kind_is_nearer_than_any_other_kind():
    conv_small, conv_large = testing.workload(0).signature, testing.workload(63).signature
    matmul = testing.workload(1).signature
    assert conv_small.op_kind == conv_large.op_kind == "conv2d" and matmul.op_kind == "matmul"
    assert np.linalg.norm(embed(conv_small) - embed(conv_large)) < np.linalg.norm(embed(conv_small) - embed(matmul))


def test_nearest_neighbours_are_similar_operators(store):
    index = SimilarityIndex(store)
    query = testing.workload(0)  # a conv2d; 7 and 14 are conv2d too
    with store.read() as s:
        own = s.execute(select(Workload.id).where(Workload.shash == query.shash)).scalar()
        kinds = dict(s.execute(select(Workload.id, Workload.op_kind)).all())
    found = index.search(embed(query.signature), k=2, exclude={own})
    assert [kinds[i] for i, _ in found] == ["conv2d", "conv2d"]
    assert found[0][1] <= found[1][1]


def test_deleting_a_workload_and_rebuilding_keeps_the_ids_right(store):
    index = SimilarityIndex(store)
    index.rebuild()
    assert index.status().in_sync
    with store.read() as s:
        victim = s.execute(select(Workload.id).where(Workload.shash == testing.workload(7).shash)).scalar()
    with store.engine.begin() as conn:
        conn.execute(delete(Workload).where(Workload.id == victim))  # its best records cascade
    assert not index.status().in_sync
    loaded = index.load()  # rebuilt because the manifest no longer matches SQL
    assert index.status().in_sync
    ids = {int(loaded.id_map.at(i)) for i in range(loaded.ntotal)}
    assert ids == sql_ids(store) and victim not in ids
    assert all(i != victim for i, _ in index.search(embed(testing.workload(7).signature), k=5))
    # The saved index, read back by a new process's worth of state, has the same ids.
    fresh = SimilarityIndex(store).load()
    assert {int(fresh.id_map.at(i)) for i in range(fresh.ntotal)} == ids


def test_index_commands(sqlite_url):
    Store(sqlite_url).ingest([testing.workload(0)], [testing.record(0, 0, testing.device())])
    runner = CliRunner()
    before = json.loads(runner.invoke(cli, ["--db", sqlite_url, "index", "status", "--json"]).output)
    assert before["exists"] is False and before["expected"] == 1
    after = runner.invoke(cli, ["--db", sqlite_url, "index", "rebuild"])
    assert after.exit_code == 0 and "in sync" in after.output and "1 indexed" in after.output


def test_rebuilds_at_the_same_time_each_write_a_whole_index(store):
    """Two runs on one registry rebuild its index at once (CI lost one's file to the other when both wrote the same
    temporary name): each rebuild finishes, and what is left is a whole index with every workload."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(lambda _: SimilarityIndex(store).rebuild(), range(16)))
    assert all(s.in_sync for s in statuses)
    fresh = SimilarityIndex(store).load()
    assert {int(fresh.id_map.at(i)) for i in range(fresh.ntotal)} == sql_ids(store)
    assert not [p.name for p in SimilarityIndex(store).path.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_manifest_vouches_only_for_the_index_saved_with_it(store):
    """The manifest and the index are one file, replaced at once: an older version's separate manifest that claims
    SQL's current state beside a stale index (what two interleaved rebuilds could leave) is not believed, and a file
    whose index does not read is rebuilt."""
    import faiss

    index = SimilarityIndex(store)
    stale = faiss.IndexIDMap2(faiss.IndexFlatL2(DIM))  # no workloads: built before any record
    index.path.parent.mkdir(parents=True, exist_ok=True)
    faiss.write_index(stale, str(index.path))  # the older layout: the index alone
    legacy = index.path.with_suffix(".faiss.json")
    legacy.write_text(json.dumps({"state": index._sql_state(), "built_at": "2026-11-28T00:00:00+00:00"}))
    assert not index.status().in_sync
    loaded = index.load()
    assert {int(loaded.id_map.at(i)) for i in range(loaded.ntotal)} == sql_ids(store)
    assert not legacy.exists()  # the older manifest is gone with the rebuild

    manifest_line = index.path.read_bytes().split(b"\n", 1)[0]
    index.path.write_bytes(manifest_line + b"\nnot an index")  # the manifest still matches SQL
    assert SimilarityIndex(store).status().in_sync
    fresh = SimilarityIndex(store).load()  # the index part fails to read: rebuilt, not an internal error
    assert {int(fresh.id_map.at(i)) for i in range(fresh.ntotal)} == sql_ids(store)
    assert SimilarityIndex(store).status().in_sync


def test_an_index_in_memory_is_not_used_once_sql_moved_on(store):
    """A run holds the index it loaded; another run adds a workload and rebuilds the saved file. The first run's next
    ``load`` must find the new workload: the saved file is in sync with SQL, but its index in memory is not."""
    first = SimilarityIndex(store)
    before = first.load().ntotal
    store.ingest([testing.workload(30)], [testing.record(30, 0, testing.device())])
    SimilarityIndex(store).rebuild()  # the other run
    assert first.load().ntotal == before + 1
    assert first.status().in_sync and first.status().exists
