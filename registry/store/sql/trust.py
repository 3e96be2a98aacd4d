"""How far a reader trusts records: the ``--trust`` of compile, transfer, tune and lookup.

Records are "measured" (by this registry), "imported" (from a log, bundle or sync, as claimed), "verified" (imported,
then re-measured here within tolerance) or "disputed" (re-measured, and not). A reader accepts "verified" (measured
here or verified only) or "imported" (the default: those and the imported ones, still preferring the former: see
``BestRecord``). Disputed records are never used.
"""

from __future__ import annotations

from sqlalchemy import case

from registry.errors import BadInputError
from registry.store.sql.models import TRUST_TIER, TuningRecord

TRUST_CHOICES = ("imported", "verified")
DEFAULT_TRUST = "imported"


def accepted(trust: str) -> tuple[str, ...]:
    """The trust levels of records a reader with this ``--trust`` uses."""
    if trust == "verified":
        return ("measured", "verified")
    if trust == "imported":
        return ("measured", "verified", "imported")
    raise BadInputError(f"unknown trust {trust!r}; expected one of {', '.join(TRUST_CHOICES)}")


def max_tier(trust: str) -> int:
    """The highest ``BestRecord.tier`` a reader with this ``--trust`` uses."""
    return 1 if "imported" in accepted(trust) else 0


# models.TRUST_TIER as SQL (0 for records measured here or verified, 1 for the rest): the first key of "best".
TIER = case((TuningRecord.trust.in_([t for t, tier in TRUST_TIER.items() if tier == 0]), 0), else_=1)
