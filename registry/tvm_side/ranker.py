"""The ranking predictor (kind ``xgb-rank-v1``): which of a workload's schedules runs fastest on a device.

One row per program: MetaSchedule's per-store features (``PerStoreFeature``) summed over the program's blocks, then
the device's descriptor (``descriptor``), so that one model learns from, and ranks for, several devices. XGBoost is
trained with a ranking objective within each workload (the query id is the workload): a pick needs the order of one
workload's schedules, not their latencies. TVM's own ``XGBModel`` regresses each program's throughput normalised by
its workload's best instead; ``bench/predictor/evaluate.py`` compares the two (docs/BENCHMARKS.md, "A predictor that
ranks").

In a tuning run the model is MetaSchedule's cost model (``RankingModel``): ``update`` adds what the run measured and
grows the pre-trained booster by ``UPDATE_ROUNDS`` trees fitted to the run's own workloads, so the pre-trained trees
keep ranking what the run has not measured yet, and the booster never grows past its base by more than that.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature
from tvm.s_tir.meta_schedule.utils import shash2hex
from tvm.target import Target

from registry.tvm_side import predictor_blob

KIND = predictor_blob.RANK_KIND
LAYOUT = "store-sum+device-v1"  # the row layout a stored booster was trained on
PARAMS: dict[str, Any] = {
    "objective": "rank:pairwise",
    "max_depth": 8,
    "eta": 0.1,
    "min_child_weight": 1,
    "subsample": 0.8,
    "colsample_bytree": 0.8,
    "seed": 0,
    "verbosity": 0,
}
ROUNDS = 300
UPDATE_ROUNDS = 30
# A run's own measurements are the most telling ones about its workloads: its trees take larger steps than the base's.
UPDATE_PARAMS = {"eta": 0.3, "min_child_weight": 0, "max_delta_step": 1}
DESCRIPTOR_WIDTH = 7


def descriptor(target: Target, threads: int) -> np.ndarray:
    """What sets a device apart for a schedule's speed, as numbers: GPU or not, log2 of the vector width in bits
    (CPU), of the cores and of the runtime threads, the CUDA arch (90 for sm_90), log2 of the threads per block and
    of the shared memory per block (GPU)."""
    if target.kind.name == "cuda":
        arch = str(target.attrs.get("arch", "sm_0")).removeprefix("sm_")
        return np.array(
            [1, 0, 0, 0, float(arch) if arch.isdigit() else 0,
             _log2(target.attrs.get("max_threads_per_block", 0)),
             _log2(target.attrs.get("max_shared_memory_per_block", 0))],
            dtype=np.float32,
        )  # fmt: skip
    cores = int(target.attrs.get("num-cores", 0) or 0)
    return np.array([0, _log2(_vector_bits(target)), _log2(cores), _log2(threads), 0, 0, 0], dtype=np.float32)


# The widest vector registers an llvm target's features give, widest first. (LLVM's own "vector width" query answers
# 512 for every x86 mcpu here, SSE-only ones included.)
_VECTOR_FEATURES = (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse2", 128), ("neon", 128))


def _vector_bits(target: Target) -> int:
    from tvm.target import codegen

    for feature, bits in _VECTOR_FEATURES:
        try:
            if codegen.target_has_features([feature], target):
                return bits
        except Exception:  # noqa: BLE001, S112 - LLVM raises for a feature its target does not know of
            continue
    return 0


def _log2(value: Any) -> float:
    number = int(value or 0)
    return math.log2(number) if number > 0 else 0.0


def program_rows(blocks: list[np.ndarray], device: np.ndarray) -> np.ndarray:
    """One row per program: its blocks' features summed, then the device's descriptor."""
    summed = np.stack([b.sum(axis=0) for b in blocks]) if blocks else np.zeros((0, 0), np.float32)
    return np.hstack([summed, np.tile(device, (len(blocks), 1))]).astype(np.float32)


def relevance(mean_s: np.ndarray) -> np.ndarray:
    """Each program's throughput over its workload's best: 1 for the best, towards 0 for slow ones."""
    return mean_s.min() / mean_s


def fit(
    rows: np.ndarray,
    labels: np.ndarray,
    qid: np.ndarray,
    rounds: int = ROUNDS,
    base=None,
    nthread: int = 1,
    params: dict[str, Any] | None = None,
):
    """A booster ranking ``rows`` within each query (workload), grown from ``base`` when given; ``params`` override
    ``PARAMS`` (the benchmark's alternatives)."""
    import xgboost as xgb

    order = np.argsort(qid, kind="stable")  # XGBoost wants each query's rows together
    matrix = xgb.DMatrix(rows[order], label=labels[order], qid=qid[order])
    merged = {**PARAMS, "nthread": nthread, **(params or {})}
    return xgb.train(merged, matrix, num_boost_round=rounds, xgb_model=base)


def scores(booster, rows: np.ndarray) -> np.ndarray:
    import xgboost as xgb

    return booster.predict(xgb.DMatrix(rows))


@derived_object
class RankingModel(PyCostModel):
    """MetaSchedule's cost model over a pre-trained ranking booster, for one device (``target``, ``threads``).

    Without a booster it predicts at random until its first update, as TVM's XGBModel does.
    """

    def __init__(self, booster, target: Target, threads: int, nthread: int = 1) -> None:
        super().__init__()
        self.base = self.booster = booster
        self.device = descriptor(target, threads)
        self.nthread = nthread
        self.extractor = PerStoreFeature()
        self.measured: dict[str, tuple[list[np.ndarray], list[float]]] = {}  # workload hash -> rows, mean seconds
        self._rng = np.random.default_rng(0)

    def _rows(self, context, candidates) -> np.ndarray:
        blocks = [f.numpy() for f in self.extractor.extract_from(context, candidates)]
        return program_rows([b if len(b) else np.zeros((1, b.shape[1] or 164), np.float32) for b in blocks],
                            self.device)  # fmt: skip

    def predict(self, context, candidates) -> np.ndarray:
        if self.booster is None:
            return self._rng.uniform(size=len(candidates))
        return scores(self.booster, self._rows(context, candidates)).astype("float64")

    def update(self, context, candidates, results) -> None:
        rows = self._rows(context, candidates)
        kept, seconds = self.measured.setdefault(shash2hex(context.mod), ([], []))
        for row, result in zip(rows, results, strict=True):
            if result.error_msg is None and result.run_secs:
                kept.append(row)
                seconds.append(float(np.mean([float(s) for s in result.run_secs])))
        groups = [(np.stack(r), np.asarray(s)) for r, s in self.measured.values() if len(s) >= 2]
        if not groups:
            return
        x = np.concatenate([r for r, _ in groups])
        y = np.concatenate([relevance(s) for _, s in groups])
        qid = np.concatenate([[k] * len(s) for k, (_, s) in enumerate(groups)])
        if self.base is None:
            self.booster = fit(x, y, qid, ROUNDS // 3, nthread=self.nthread)
        else:
            self.booster = fit(x, y, qid, UPDATE_ROUNDS, base=self.base, nthread=self.nthread, params=UPDATE_PARAMS)

    def load(self, path: str) -> None:
        raise NotImplementedError("a ranking predictor is read from the registry, not from a file")

    def save(self, path: str) -> None:
        raise NotImplementedError("a ranking predictor is stored in the registry, not in a file")
