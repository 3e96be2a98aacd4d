"""How well a ranking picks schedules, in TenSet's terms and a few more. Numpy only.

For one workload with measured latencies ``lat`` and predicted scores ``score`` (higher: predicted faster):

- top-k score: the best latency over the best latency among the k programs ranked highest (1: the ranking's top k
  hold the best program). TenSet's figure, averaged over workloads weighted by their task weight;
- Spearman's rank correlation of score and throughput, pairwise accuracy (the share of pairs of programs with
  different latencies that the scores order the same way), top-1 regret (the predicted best's latency over the best,
  minus 1);
- a random ranking's expected top-k score and regret, computed exactly from the order statistics.

Programs the scores tie are ranked slowest first: a ranking gets no credit for the order its data came in (a model
that scores everything alike would otherwise pick whatever program was listed first, and stores list the fastest
first).
"""

from __future__ import annotations

from math import comb

import numpy as np


def picked(lat: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Program indices in the order the scores rank them, ties slowest first."""
    return np.lexsort((-np.asarray(lat, float), -np.asarray(score, float)))


def top_k_score(lat: np.ndarray, score: np.ndarray, k: int) -> float:
    top = picked(lat, score)[: min(k, len(lat))]
    return float(lat.min() / lat[top].min())


def random_top_k_score(lat: np.ndarray, k: int) -> float:
    """E[best / min of k drawn without replacement]: the i-th fastest is the drawn minimum with probability
    C(n-1-i, k-1) / C(n, k)."""
    ordered = np.sort(lat)
    n, k = len(ordered), min(k, len(ordered))
    total = comb(n, k)
    return float(sum(comb(n - 1 - i, k - 1) / total * ordered[0] / ordered[i] for i in range(n - k + 1)))


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def top_k_recall(score: np.ndarray, truth: np.ndarray, k: int) -> float:
    """The share of the true ``k`` best (highest ``truth``) among the ``k`` highest ``score``; k capped at n."""
    k = min(k, len(truth))
    best = set(np.argsort(-truth, kind="stable")[:k].tolist())
    chosen = set(picked(1 / np.asarray(truth, float), score)[:k].tolist())
    return len(best & chosen) / k


def pairwise_accuracy(lat: np.ndarray, score: np.ndarray) -> float:
    faster = lat[:, None] < lat[None, :]
    agree = (score[:, None] > score[None, :]) & faster
    return float(agree.sum() / max(1, faster.sum()))


def workload_row(lat: np.ndarray, score: np.ndarray) -> dict[str, float]:
    lat, score = np.asarray(lat, float), np.asarray(score, float)
    return {
        "top1": top_k_score(lat, score, 1),
        "top5": top_k_score(lat, score, 5),
        "spearman": spearman(score, 1 / lat),
        "pairwise": pairwise_accuracy(lat, score),
        "regret1": float(lat[picked(lat, score)[0]] / lat.min() - 1),
        "random_top1": random_top_k_score(lat, 1),
        "random_top5": random_top_k_score(lat, 5),
        "random_regret1": float(lat.mean() / lat.min() - 1),
    }


def weighted(rows: list[dict], weights: list[float]) -> dict[str, float]:
    """Each figure's mean over workloads, weighted as TenSet weights tasks."""
    w = np.asarray(weights, float)
    return {key: float(np.dot(w, [r[key] for r in rows]) / w.sum()) for key in rows[0]} if rows else {}
