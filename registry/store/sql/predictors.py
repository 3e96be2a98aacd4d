"""Pre-trained cost models as versioned artifacts of a device. Bytes in, bytes out: what the blob means is the TVM
side's business (``registry.tvm_side.predictor``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, func, insert, select
from sqlalchemy.orm import Session

from registry.errors import UnknownDeviceError
from registry.store.sql.models import Device, Predictor
from registry.store.values import PredictorInfo, StoredPredictor

T = TypeVar("T")


class Store(Protocol):
    """What these functions need of ``registry.store.sql.store.Store``, which serves them as its methods (so this module
    cannot import it)."""

    def read(self) -> AbstractContextManager[Session]: ...

    def transact(self, fn: Callable[[Connection], T]) -> T: ...


def save_predictor(
    store: Store,
    device_id: int,
    kind: str,
    blob: bytes,
    metrics: dict[str, Any],
    n_workloads: int,
    n_records: int,
    tvm_version: str,
) -> int:
    """Store a predictor as the device's next version (1 for its first); returns that version."""

    def write(conn: Connection) -> int:
        # Locking the device row serializes two trainings of one device on PostgreSQL, which would otherwise both
        # read the same latest version; SQLite's writers are serialized already (and it ignores FOR UPDATE).
        found = conn.execute(select(Device.id).where(Device.id == device_id).with_for_update()).scalar()
        if found is None:
            raise UnknownDeviceError(f"no device {device_id} in the registry; see `registry devices`")
        latest = conn.execute(select(func.max(Predictor.version)).where(Predictor.device_id == device_id)).scalar()
        version = (latest or 0) + 1
        conn.execute(
            insert(Predictor).values(
                device_id=device_id,
                version=version,
                kind=kind,
                tvm_version=tvm_version,
                n_workloads=n_workloads,
                n_records=n_records,
                metrics_json=json.dumps(metrics, sort_keys=True),
                blob=blob,
            )
        )
        return version

    return store.transact(write)


_INFO_COLS = (
    Predictor.id,
    Predictor.device_id,
    Device.name,
    Predictor.version,
    Predictor.kind,
    Predictor.tvm_version,
    Predictor.n_workloads,
    Predictor.n_records,
    Predictor.metrics_json,
    func.length(Predictor.blob),
    Predictor.created_at,
)


def _info(row) -> PredictorInfo:
    *head, metrics_json, blob_bytes, created_at = row
    return PredictorInfo(*head, metrics=json.loads(metrics_json), blob_bytes=blob_bytes, created_at=created_at)


def latest_predictor(store: Store, device_id: int, kind: str | None = None) -> StoredPredictor | None:
    """The device's newest predictor (of ``kind``, if given), blob included; None when it has none."""
    stmt = select(*_INFO_COLS, Predictor.blob).join(Device, Device.id == Predictor.device_id)
    stmt = stmt.where(Predictor.device_id == device_id)
    if kind is not None:
        stmt = stmt.where(Predictor.kind == kind)
    stmt = stmt.order_by(Predictor.version.desc()).limit(1)
    with store.read() as conn:
        row = conn.execute(stmt).first()
    if row is None:
        return None
    *info, blob = row
    return StoredPredictor(**_info(info).__dict__, blob=bytes(blob))


def list_predictors(store: Store, device_id: int | None = None) -> list[PredictorInfo]:
    """Every stored predictor (of one device, if given), without blobs: by device, then version."""
    stmt = select(*_INFO_COLS).join(Device, Device.id == Predictor.device_id)
    if device_id is not None:
        stmt = stmt.where(Predictor.device_id == device_id)
    stmt = stmt.order_by(Predictor.device_id, Predictor.version)
    with store.read() as conn:
        return [_info(r) for r in conn.execute(stmt)]
