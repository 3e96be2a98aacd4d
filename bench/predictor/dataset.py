"""The collected programs as arrays: each workload's ok records with MetaSchedule's per-block features.

Features come from the stored traces, replayed on the stored workload (``apply_trace.as_stored``) and read by
MetaSchedule's ``PerStoreFeature``, as ``registry predictor train`` reads them. Extraction is the slow part (about
10 ms a program here), so each workload's arrays are cached in ``--cache`` and read again while its record count is
unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = ROOT / "bench" / "work" / "predictor" / "features"
VARIANT_MARK = "@"  # in a model's name: the model at other input shapes (collect.py --scale), trained on, not judged


def base_model(name: str) -> str:
    """The corpus model a variant was imported from (the name itself for a corpus model)."""
    return name.split(VARIANT_MARK, 1)[0]


@dataclass
class WorkloadData:
    workload_id: int
    task: str
    models: list[str]  # the models that have the task
    weight: int  # its weight summed over those models, variants only where no other has it (TenSet's task weight)
    blocks: list[np.ndarray]  # one (blocks, features) array per program
    mean_s: np.ndarray  # each program's mean latency
    device: np.ndarray  # the device's descriptor (registry.tvm_side.ranker.descriptor)

    @property
    def size(self) -> int:
        return len(self.mean_s)

    @property
    def judged(self) -> bool:
        """A task of a corpus model as catalogued, or of no stored model: the evaluation ranks it (a task that only
        shape variants have only trains)."""
        return not self.models or any(VARIANT_MARK not in m for m in self.models)


def _model_weights(storage) -> dict[int, tuple[list[str], int]]:
    found: dict[int, tuple[list[str], int, int]] = {}
    for name in storage.model_names(limit=10_000):
        m = storage.find_models(name)[0]
        for t in storage.model_tasks(m.id):
            names, weight, of_variants = found.get(t.workload_id, ([], 0, 0))
            if VARIANT_MARK in m.name:
                of_variants += t.weight
            else:
                weight += t.weight
            found[t.workload_id] = ([*names, m.name], weight, of_variants)
    return {wid: (names, weight or of_variants) for wid, (names, weight, of_variants) in found.items()}


def variant_only(storage) -> set[int]:
    """The workloads that only shape variants have: trained on, never judged (``WorkloadData.judged``)."""
    return {wid for wid, (names, _) in _model_weights(storage).items() if all(VARIANT_MARK in m for m in names)}


def load(url: str, device: str, *, extract_workload: bool = False, cache: Path = DEFAULT_CACHE, progress=print):
    """Every workload of ``device`` with ok records, as ``WorkloadData`` (features extracted or read from the cache)."""
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    from registry.store.factory import open_storage
    from registry.tvm_side import cpus
    from registry.tvm_side.compat import load_tensor_intrinsics
    from registry.tvm_side.predictor import TrainingSource
    from registry.tvm_side.ranker import descriptor

    storage = open_storage(url)
    row = storage.resolve_one_device(device)
    source = TrainingSource(storage, row.id)
    described = descriptor(source.target, row.num_threads)
    load_tensor_intrinsics(source.target.kind.name)
    extractor = PerStoreFeature(extract_workload=extract_workload)
    where = cache / f"{source.device_name.replace(':', '-')}{'-w' if extract_workload else ''}"
    where.mkdir(parents=True, exist_ok=True)
    weights = _model_weights(storage)
    found = []
    for k, (wid, (task, n)) in enumerate(sorted(source.counts.items())):
        path = where / f"{wid}.npz"
        if path.exists() and int(np.load(path)["n"]) == n:
            z = np.load(path)
            splits = np.cumsum(z["blocks"])[:-1]
            blocks, mean_s = np.split(z["features"], splits), z["mean_s"]
        else:
            g = source.group(source.rows(wid), cpus.count(), extractor)
            blocks, mean_s = g.features, g.mean_s
            counts = np.array([len(b) for b in blocks], dtype=np.int64)
            features = np.concatenate(blocks) if blocks else np.zeros((0, 1), np.float32)
            np.savez(path, features=features, blocks=counts, mean_s=mean_s, n=n)
        if k % 50 == 0:
            progress(f"  features: {k}/{len(source.counts)} workloads")
        models, weight = weights.get(wid, ([], 1))
        found.append(
            WorkloadData(wid, task, models, max(1, weight), list(blocks), np.asarray(mean_s, float), described)
        )
    return found


def summary(data: list[WorkloadData]) -> dict:
    return {
        "workloads": len(data),
        "programs": int(sum(d.size for d in data)),
        "rankable_workloads": sum(1 for d in data if d.size >= 8),
    }


if __name__ == "__main__":
    import sys

    print(json.dumps(summary(load(sys.argv[1], sys.argv[2])), indent=1))
