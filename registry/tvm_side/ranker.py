"""The ranking predictor (kind ``xgb-rank-v1``): which of a workload's schedules runs fastest on a device.

Rows are blocks: MetaSchedule's per-store features (``PerStoreFeature``) of each block of a program, each followed by
the device's descriptor (``descriptor``), so that one model learns from, and ranks for, several devices. A program's
score is the sum of its blocks' (TVM's "pack-sum"), and XGBoost learns them with a ranking loss within each workload
(``pairwise_pack_sum_objective``): a pick needs the order of one workload's schedules, not their latencies. TVM's own
``XGBModel`` regresses each program's throughput normalised by its workload's best; XGBoost's built-in ranking
objectives need one row a program. ``bench/predictor/evaluate.py`` compares them (docs/BENCHMARKS.md, "A predictor
that ranks").

In a tuning run the model is MetaSchedule's cost model (``RankingModel``): ``update`` adds what the run measured and
grows the pre-trained booster by ``UPDATE_ROUNDS`` trees fitted to the run's own workloads, so the pre-trained trees
keep ranking what the run has not measured yet, and the booster never grows past its base by more than that.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature
from tvm.s_tir.meta_schedule.utils import shash2hex
from tvm.target import Target

from registry.tvm_side import predictor_blob

KIND = predictor_blob.RANK_KIND
LAYOUT = predictor_blob.RANK_LAYOUT  # the rows a stored booster was trained on
PARAMS: dict[str, Any] = {
    "max_depth": 8,
    "eta": 0.1,
    "min_child_weight": 1,
    "subsample": 0.8,
    "colsample_bytree": 0.8,
    "seed": 0,
    "verbosity": 0,
}
ROUNDS = 300
# How much a pair's weight grows with its better program's throughput (see pairwise_pack_sum_objective).
SHARPNESS = 4.0
UPDATE_ROUNDS = 30
# A run's own measurements are the most telling ones about its workloads: its trees take larger steps than the base's,
# and split where the base's margins already saturate the loss (its hessians there are near 0).
UPDATE_PARAMS = {"eta": 0.3, "min_child_weight": 0, "max_delta_step": 1}
FEATURE_WIDTH = predictor_blob.PER_STORE_FEATURES  # PerStoreFeature's, per block
ROW_WIDTH = predictor_blob.RANK_WIDTH  # and the descriptor's 7


def descriptor(target: Target, threads: int) -> np.ndarray:
    """What sets a device apart for a schedule's speed, as numbers: GPU or not, log2 of the vector width in bits
    (CPU), of the cores and of the runtime threads, the CUDA arch (90 for sm_90), log2 of the threads per block and
    of the shared memory per block (GPU)."""
    if target.kind.name == "cuda":
        digits = re.match(r"sm_(\d+)", str(target.attrs.get("arch", "")))  # sm_90a is an sm_90
        return np.array(
            [1, 0, 0, 0, float(digits.group(1)) if digits else 0,
             _log2(target.attrs.get("max_threads_per_block", 0)),
             _log2(target.attrs.get("max_shared_memory_per_block", 0))],
            dtype=np.float32,
        )  # fmt: skip
    cores = int(target.attrs.get("num-cores", 0) or 0)
    return np.array([0, _log2(_vector_bits(target)), _log2(cores), _log2(threads), 0, 0, 0], dtype=np.float32)


def device_class(target: Target) -> str:
    """The class of devices one shipped predictor serves: a GPU's arch ("cuda sm_90"), a CPU's widest vector registers
    ("llvm 512-bit"). The descriptor's vector width alone does not keep classes apart: trained on AVX2 programs too, a
    predictor ranked an AVX-512 Xeon's schedules worse (docs/BENCHMARKS.md, "Devices held out")."""
    described = descriptor(target, 1)
    if described[0]:
        return f"cuda sm_{int(described[4])}"
    return f"{target.kind.name} {_vector_bits(target)}-bit"


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


def block_rows(blocks: list[np.ndarray], device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every program's blocks as rows, each with the device's descriptor, and each row's program."""
    rows = np.concatenate([np.hstack([b, np.tile(device, (len(b), 1))]) for b in blocks]).astype(np.float32)
    program = np.concatenate([np.full(len(b), k) for k, b in enumerate(blocks)])
    return rows, program


def relevance(mean_s: np.ndarray) -> np.ndarray:
    """Each program's throughput over its workload's best: 1 for the best, towards 0 for slow ones."""
    return mean_s.min() / mean_s


def pairwise_pack_sum_objective(program: np.ndarray, query: np.ndarray, labels: np.ndarray, sharpness: float):
    """XGBoost's custom objective for block rows: a program's score is its blocks' sum (``program``: each row's
    program; ``query``: each program's workload; ``labels``: each program's relevance), and programs are ranked by a
    pairwise logistic loss within each workload. A pair weighs the gap of its gains, 2^(sharpness x relevance) (the
    relevance itself for sharpness 0), so that pairs of fast programs weigh most, as picking the best needs. A row's
    gradient and hessian are its program's, as TVM's pack-sum regression passes them."""
    groups = [np.flatnonzero(query == q) for q in np.unique(query)]
    gains = np.exp2(sharpness * labels) if sharpness else labels  # sharpness 0: the plain relevance gap

    def objective(predt: np.ndarray, _matrix):
        s = np.bincount(program, weights=predt, minlength=len(labels))
        grad, hess = np.zeros_like(s), np.zeros_like(s)
        for members in groups:
            g, v = gains[members], s[members]
            weight = np.maximum(g[:, None] - g[None, :], 0.0)  # pairs (i, j) with i the faster
            p = 1 / (1 + np.exp(np.clip(v[:, None] - v[None, :], -30, 30)))  # sigmoid(s_j - s_i)
            d1, d2 = weight * p, weight * p * (1 - p)
            grad[members] += d1.sum(axis=0) - d1.sum(axis=1)
            hess[members] += d2.sum(axis=1) + d2.sum(axis=0)
        return grad[program], np.maximum(hess[program], 1e-6)

    return objective


def fit(
    workloads: list[tuple[list[np.ndarray], np.ndarray, np.ndarray]],
    rounds: int = ROUNDS,
    base=None,
    nthread: int = 1,
    params: dict[str, Any] | None = None,
    sharpness: float = SHARPNESS,
):
    """A booster ranking each workload's programs, grown from ``base`` when given. ``workloads``: per workload, the
    block features of each program, each program's mean seconds, and the device's descriptor."""
    import xgboost as xgb

    rows, program, query, labels, offset = [], [], [], [], 0
    for q, (blocks, mean_s, device) in enumerate(workloads):
        r, p = block_rows(blocks, device)
        rows.append(r)
        program.append(p + offset)
        offset += len(blocks)
        query.append(np.full(len(blocks), q))
        labels.append(relevance(np.asarray(mean_s, float)))
    objective = pairwise_pack_sum_objective(
        np.concatenate(program), np.concatenate(query), np.concatenate(labels), sharpness
    )
    merged = {**PARAMS, "nthread": nthread, **(params or {})}
    return xgb.train(merged, xgb.DMatrix(np.concatenate(rows)), num_boost_round=rounds, obj=objective, xgb_model=base)


def program_scores(booster, blocks: list[np.ndarray], device: np.ndarray) -> np.ndarray:
    """Each program's score (higher: predicted faster)."""
    import xgboost as xgb

    if not blocks:
        return np.zeros(0)
    rows, program = block_rows(blocks, device)
    return np.bincount(program, weights=booster.predict(xgb.DMatrix(rows)), minlength=len(blocks))


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
        self.measured: dict[str, tuple[list[np.ndarray], list[float]]] = {}  # workload hash -> blocks, mean seconds
        self._rng = np.random.default_rng(0)

    def features(self, context, candidates) -> list[np.ndarray]:
        """Each candidate's rows: its blocks' features (MetaSchedule's ``PerStoreFeature``), one zero row for none."""
        blocks = [f.numpy() for f in self.extractor.extract_from(context, candidates)]
        return [b if len(b) else np.zeros((1, FEATURE_WIDTH), np.float32) for b in blocks]

    def predict(self, context, candidates) -> np.ndarray:
        if self.booster is None:
            return self._rng.uniform(size=len(candidates))
        return program_scores(self.booster, self.features(context, candidates), self.device).astype("float64")

    def update(self, context, candidates, results) -> None:
        blocks = self.features(context, candidates)
        kept, seconds = self.measured.setdefault(shash2hex(context.mod), ([], []))
        # a failed candidate has no latency to rank by; the search already avoids it (MetaSchedule's own XGBModel
        # trains on it as infinitely slow, which a pairwise loss needs no sample of)
        for b, result in zip(blocks, results, strict=True):
            if result.error_msg is None and result.run_secs:
                kept.append(b)
                seconds.append(float(np.mean([float(s) for s in result.run_secs])))
        groups = [(b, np.asarray(s), self.device) for b, s in self.measured.values() if len(s) >= 2]
        if not groups:
            return
        if self.base is None:
            self.booster = fit(groups, ROUNDS // 3, nthread=self.nthread)
        else:
            self.booster = fit(groups, UPDATE_ROUNDS, base=self.base, nthread=self.nthread, params=UPDATE_PARAMS)

    def load(self, path: str) -> None:
        raise NotImplementedError("a ranking predictor is read from the registry, not from a file")

    def save(self, path: str) -> None:
        raise NotImplementedError("a ranking predictor is stored in the registry, not in a file")
