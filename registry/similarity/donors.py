"""Donor search: the stored records most likely to schedule a new workload well, best bets first. No TVM here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from registry.similarity.index import SimilarityIndex
from registry.store.embedding import OP_WEIGHT
from registry.store.interface import StoredRecord

# Workloads of different operator kinds are at least 2 * OP_WEIGHT**2 apart (squared L2 over the one-hot block),
# and no shape difference of one kind comes near OP_WEIGHT**2: a donor must be closer than that.
MAX_DISTANCE = OP_WEIGHT**2


@dataclass
class Donor:
    record: StoredRecord
    workload_id: int
    task_name: str
    distance: float  # squared L2 between the embeddings
    same_device: bool
    rank: int  # 1 for the donor workload's best record on its device
    flops: float = 0.0  # the donor workload's floating-point operations
    source: str = "tuned"  # how its record was made
    device_id: int = 0  # the device its record was measured on

    @property
    def rate(self) -> float | None:
        """FLOP/s its record reached on its own workload, where both are known and the record was searched for
        (tuned, imported), not itself transferred: a transferred record's rate says only what its own donor's
        schedule made of it."""
        mean_s = self.record.mean_s
        searched = self.source != "transferred"
        return self.flops / mean_s if searched and self.flops > 0 and mean_s else None


def best_rate(donors: list[Donor]) -> float | None:
    """The highest FLOP/s the donors' own records reached (``Donor.rate``), on any device: what a schedule found for
    a similar workload reaches, and so about what a good schedule for this one should."""
    return max((r for d in donors if (r := d.rate) is not None), default=None)


def find_donors(
    index: SimilarityIndex,
    vector: np.ndarray,
    device_id: int,
    target_kind: str,
    *,
    k: int = 5,
    per_device: int = 2,
    exclude: frozenset[int] = frozenset(),
) -> list[Donor]:
    """Records of the ``k`` nearest workloads of the same operator kind, in the order they are worth trying.

    Order: every donor's best record on this device (nearest donor first), then their runners-up here, then records
    measured on other devices of the same target kind, which say less about this one. Records of another target kind
    (a GPU trace for a CPU task) are never donors. The index is searched as loaded (see SimilarityIndex.search).
    """
    near = [(wid, d) for wid, d in index.search(vector, k, set(exclude), refresh=False) if d < MAX_DISTANCE]
    if not near:
        return []
    distance = dict(near)
    found = index.store.donor_records(list(distance), per_device, target_kind)
    donors = [
        Donor(
            r.record,
            r.record.workload_id,
            r.task_name,
            distance[r.record.workload_id],
            r.device_id == device_id,
            r.rank,
            r.flops,
            r.source,
            r.device_id,
        )
        for r in found
    ]
    donors.sort(key=donor_order)
    return donors


def donor_order(d: Donor) -> tuple:
    """Which donor to try first: this device's records before other devices', best ranks, then the nearest."""
    return (not d.same_device, d.rank, d.distance, d.record.mean_s or 0.0, d.record.id)
