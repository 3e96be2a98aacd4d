"""The trust vocabulary (``registry.store.trust``) as SQL: what a query orders and filters records by."""

from __future__ import annotations

from sqlalchemy import case

from registry.store.sql.models import TuningRecord
from registry.store.trust import TRUST_TIER

# TRUST_TIER as SQL (0 for records measured here or verified, 1 for the rest): the first key of "best".
TIER = case((TuningRecord.trust.in_([t for t, tier in TRUST_TIER.items() if tier == 0]), 0), else_=1)
