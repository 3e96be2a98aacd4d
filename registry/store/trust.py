"""How far a reader trusts records: the ``--trust`` of compile, transfer, tune and lookup.

Records are "measured" (by this registry), "imported" (from a log, bundle or sync, as claimed), "verified" (imported,
then re-measured here within tolerance) or "disputed" (re-measured, and not). A reader accepts "verified" (measured
here or verified only) or "imported" (the default: those and the imported ones, still preferring the former: see
``BestRecord``). Disputed records are never used. No SQLAlchemy and no TVM: the CLI's options name these choices.
"""

from __future__ import annotations

from registry.errors import BadInputError

# How far a record is trusted here (see docs/SHARING.md). "measured": taken by this registry's own tuning or transfer;
# "imported": from a TVM log, a bundle or a sync, as claimed by its origin; "verified"/"disputed": an imported record
# re-measured by `registry verify` on its device, and found within tolerance of its claim, or not.
TRUST_LEVELS = ("measured", "imported", "verified", "disputed")
# The order in which records are preferred: a measured or verified record beats any imported one, whatever it
# claims; a disputed record is never used (it stays stored, with its re-measured latency beside the claim).
TRUST_TIER = {"measured": 0, "verified": 0, "imported": 1}

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
