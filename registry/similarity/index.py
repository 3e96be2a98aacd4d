"""A FAISS index over the embeddings of workloads that have good records: a cache of the SQL store.

Its ids are the workloads' primary keys (``IndexIDMap2``), never positions, so deleting a workload cannot shift the
others. It is saved beside an SQLite file (or, for a server database such as a team's shared PostgreSQL registry, in
this user's data folder) with a manifest of what it was built from; whenever the manifest and SQL disagree it is
rebuilt from SQL before use.

The manifest and the index are one file (the manifest's JSON on the first line, FAISS's serialized index after it),
replaced by one rename: two runs rebuilding at once can then never leave one run's index under the other's manifest,
which would vouch for an index built from another state of SQL.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from registry.errors import RegistryWarning
from registry.store.embedding import DIM
from registry.store.interface import RegistryStorage
from registry.store.own_files import index_path
from registry.store.urls import redact

# Bump when embed() changes: an index built by another version is rebuilt.
EMBEDDING_VERSION = 1
MAX_MANIFEST = 1 << 16  # bytes: a manifest is a few hundred; a first line longer than this is not one


@dataclass
class IndexStatus:
    path: str
    exists: bool
    in_sync: bool
    indexed: int  # workloads in the saved index
    expected: int  # workloads with good records in SQL
    built_at: str | None


class SimilarityIndex:
    def __init__(self, store: RegistryStorage) -> None:
        self.store = store
        self.path = index_path(store.url)
        self._index: faiss.Index | None = None
        self._state: dict | None = None  # the SQL state ``_index`` was built from

    def _sql_state(self) -> dict[str, int]:
        """What the index must reflect: the set of workloads with good records, summarized."""
        found = self.store.indexed_set()
        return {
            "count": found.count,
            "id_sum": found.id_sum,
            "max_id": found.max_id,
            "dim": DIM,
            "version": EMBEDDING_VERSION,
        }

    def _manifest(self) -> dict | None:
        """The saved file's manifest; None when there is none (no file, or one of an older layout: rebuilt)."""
        try:
            with self.path.open("rb") as f:
                return _manifest_of(f.readline(MAX_MANIFEST))
        except OSError:
            return None

    def status(self) -> IndexStatus:
        manifest = self._manifest()
        state = self._sql_state()
        return IndexStatus(
            path=str(self.path),
            exists=self.path.exists(),
            in_sync=manifest is not None and manifest["state"] == state,
            indexed=manifest["state"].get("count", 0) if manifest is not None else 0,
            expected=state["count"],
            built_at=manifest.get("built_at") if manifest is not None else None,
        )

    def rebuild(self) -> IndexStatus:
        """Build the index from SQL and save it with its manifest, both in one file replaced at once."""
        state = self._sql_state()
        ids, vectors, bad = [], [], []
        for wid, blob in self.store.indexed_embeddings():
            vector = np.frombuffer(blob, dtype=np.float32) if len(blob) == 4 * DIM else None
            if vector is None or not np.isfinite(vector).all():  # a row no registry wrote: no donor to anyone
                bad.append(wid)
                continue
            ids.append(wid)
            vectors.append(vector)
        if bad:
            warnings.warn(
                f"{len(bad)} workload(s) left out of the similarity index: their stored embedding is not "
                f"{DIM} finite floats (first: workload {bad[0]})",
                RegistryWarning,
                stacklevel=2,
            )
        index = faiss.IndexIDMap2(faiss.IndexFlatL2(DIM))
        if ids:
            index.add_with_ids(np.vstack(vectors), np.asarray(ids, dtype=np.int64))
        manifest = {
            "state": state,
            "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "faiss": faiss.__version__,
            "database": redact(self.store.url),
        }
        content = json.dumps(manifest).encode() + b"\n" + faiss.serialize_index(index).tobytes()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _replaced(self.path, lambda tmp: Path(tmp).write_bytes(content))
        with contextlib.suppress(OSError):  # the manifest's own file, before it moved into the index's
            self.path.with_suffix(".faiss.json").unlink()
        self._index, self._state = index, state
        return self.status()

    def load(self) -> faiss.Index:
        """The index as of SQL's state now: the one in memory if it was built from that state, else the saved one if
        its manifest says so (manifest and index read in one read, as one rename wrote them), else rebuilt."""
        state = self._sql_state()
        if self._index is not None and self._state == state:
            return self._index
        saved = self._saved()
        if saved is not None and saved[0]["state"] == state:
            self._index, self._state = saved[1], state
        else:
            self.rebuild()
        return self._index

    def _saved(self) -> tuple[dict, faiss.Index] | None:
        """The saved file's manifest and index; None when there is none, or it does not read."""
        try:
            content = self.path.read_bytes()
        except OSError:
            return None
        line, _, rest = content.partition(b"\n")
        manifest = _manifest_of(line[:MAX_MANIFEST])
        if manifest is None:
            return None
        try:
            return manifest, faiss.deserialize_index(np.frombuffer(rest, dtype=np.uint8))
        except RuntimeError:  # FAISS's error for bytes that are no index
            return None

    def add(self, workload_id: int, vector: np.ndarray) -> None:
        """Make a workload that just got a good record findable in this process, without a rebuild. The saved index
        and its manifest are untouched: the next ``load`` sees them out of date and rebuilds from SQL."""
        index = self.load() if self._index is None else self._index
        ids = np.asarray([workload_id], dtype=np.int64)
        index.remove_ids(ids)
        index.add_with_ids(vector.reshape(1, -1).astype(np.float32), ids)

    def search(
        self, vector: np.ndarray, k: int, exclude: set[int] = frozenset(), *, refresh: bool = True
    ) -> list[tuple[int, float]]:
        """The ``k`` nearest workloads (id, squared L2 distance), nearest first, leaving out ``exclude``.

        ``refresh=False`` searches the index as last loaded, without asking SQL whether it is still current: for a
        run that searches once per task and whose own writes need not be found.
        """
        index = self._index if (self._index is not None and not refresh) else self.load()
        if index.ntotal == 0:
            return []
        want = min(index.ntotal, k + len(exclude))
        distances, ids = index.search(vector.reshape(1, -1).astype(np.float32), want)
        found = [(int(i), float(d)) for i, d in zip(ids[0], distances[0], strict=True) if i >= 0 and i not in exclude]
        return found[:k]


def _replaced(path: Path, write: Callable[[str], None]) -> None:
    """``path`` replaced at once by what ``write`` writes to a file of this writer's own beside it: two runs on one
    registry rebuild its index at the same time, and a shared temporary name lost one of them its file."""
    # made by ``write``: the umask's mode; its name ends as own_files.INDEX_FILES says, so no output lands on it
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:12]}{path.suffix}.tmp")
    try:
        write(str(tmp))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # the write's own error says more (a read-only folder: EROFS here too)
            tmp.unlink()
        raise


def _manifest_of(line: bytes) -> dict | None:
    """A saved file's first line as its manifest; None when it is none (an older layout's binary index, or text no
    version wrote)."""
    try:
        manifest = json.loads(line)
    except ValueError:  # UnicodeDecodeError included
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("state"), dict) else None
