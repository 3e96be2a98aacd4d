"""Pre-trained cost models as versioned artifacts of a device. Bytes in, bytes out: what the blob means is the TVM
side's business (``registry.tvm_side.predictor``)."""

from __future__ import annotations

import json
from dataclasses import fields

from sqlalchemy import Connection, func, insert, select

from registry.errors import DeviceNotFoundError
from registry.store.decode import CorruptRow, parse
from registry.store.sql.models import Device, Predictor
from registry.store.values import PredictorIn, PredictorInfo, StoredPredictor


def save(conn: Connection, p: PredictorIn) -> int:
    """Store a predictor as its device's next version (1 for its first), in ``conn``'s transaction; returns that
    version."""
    # Locking the device row serializes two trainings of one device on PostgreSQL, which would otherwise both read the
    # same latest version; SQLite's writers are serialized already (and it ignores FOR UPDATE).
    found = conn.execute(select(Device.id).where(Device.id == p.device_id).with_for_update()).scalar()
    if found is None:
        raise DeviceNotFoundError(f"no device {p.device_id} in the registry; see `registry devices`")
    latest = conn.execute(select(func.max(Predictor.version)).where(Predictor.device_id == p.device_id)).scalar()
    version = (latest or 0) + 1
    row = {f.name: getattr(p, f.name) for f in fields(p) if f.name != "metrics"}  # the columns of the same names
    conn.execute(insert(Predictor).values(**row, version=version, metrics_json=json.dumps(p.metrics, sort_keys=True)))
    return version


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
    return PredictorInfo(*head, metrics=_metrics(metrics_json), blob_bytes=blob_bytes, created_at=created_at)


def _metrics(text: str) -> dict:
    """A stored predictor's metrics; {} where they are not a JSON object: a shared database's row passed no import's
    check, and `predictor list` or a run's report reads what is there (``values.scores_at``)."""
    try:
        value = parse(text, "a predictor's metrics")
    except CorruptRow:
        return {}
    return value if isinstance(value, dict) else {}


def latest(conn: Connection, device_id: int, kind: str | None = None) -> StoredPredictor | None:
    """The device's newest predictor (of ``kind``, if given), blob included; None when it has none."""
    stmt = select(*_INFO_COLS, Predictor.blob).join(Device, Device.id == Predictor.device_id)
    stmt = stmt.where(Predictor.device_id == device_id)
    if kind is not None:
        stmt = stmt.where(Predictor.kind == kind)
    stmt = stmt.order_by(Predictor.version.desc()).limit(1)
    row = conn.execute(stmt).first()
    if row is None:
        return None
    *info, blob = row
    return StoredPredictor(**_info(info).__dict__, blob=bytes(blob))


def all_predictors(conn: Connection, device_id: int | None = None) -> list[PredictorInfo]:
    """Every stored predictor (of one device, if given), without blobs: by device, then version."""
    stmt = select(*_INFO_COLS).join(Device, Device.id == Predictor.device_id)
    if device_id is not None:
        stmt = stmt.where(Predictor.device_id == device_id)
    stmt = stmt.order_by(Predictor.device_id, Predictor.version)
    return [_info(r) for r in conn.execute(stmt)]
