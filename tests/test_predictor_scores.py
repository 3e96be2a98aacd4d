"""TenSet's ranking scores and the others beside them, on rankings whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from registry.tvm_side.predictor_scores import (
    pairwise_accuracy,
    random_top_k_score,
    top_k_score,
    weighted,
    workload_row,
)

LAT = np.array([4.0, 1.0, 2.0, 8.0, 3.0])  # the best is index 1


def test_top_k_score_is_the_best_over_the_best_picked():
    assert top_k_score(LAT, -LAT, 1) == 1.0  # a perfect ranking
    assert top_k_score(LAT, LAT, 1) == pytest.approx(1 / 8)  # an inverted one picks the slowest
    assert top_k_score(LAT, LAT, 2) == pytest.approx(1 / 4)  # its top two: 8 and 4
    assert top_k_score(LAT, LAT, 5) == 1.0  # k = n holds the best whatever the order


def test_a_random_rankings_expected_score_matches_drawing_at_random():
    rng = np.random.default_rng(0)
    for k in (1, 2, 5):
        drawn = np.mean([LAT.min() / rng.choice(LAT, size=k, replace=False).min() for _ in range(40_000)])
        assert random_top_k_score(LAT, k) == pytest.approx(drawn, abs=0.01)
    assert random_top_k_score(LAT, 1) == pytest.approx(np.mean(1 / LAT))


def test_pairwise_accuracy_counts_pairs_ordered_as_measured():
    assert pairwise_accuracy(LAT, -LAT) == 1.0
    assert pairwise_accuracy(LAT, LAT) == 0.0
    swapped = -LAT.copy()
    swapped[[1, 2]] = swapped[[2, 1]]  # one of the 10 pairs out of order
    assert pairwise_accuracy(LAT, swapped) == pytest.approx(0.9)


def test_workload_rows_are_weighted_by_task_weight():
    good, bad = workload_row(LAT, -LAT), workload_row(LAT, LAT)
    assert good["regret1"] == 0 and bad["regret1"] == pytest.approx(7.0)
    assert weighted([good, bad], [3, 1])["top1"] == pytest.approx((3 * 1.0 + 1 / 8) / 4)


def test_tied_scores_get_no_credit_for_the_order_programs_came_in():
    """A model that scores everything alike ranks nothing: listed fastest first (as stores list records), its pick
    must still be the slowest of the tie, not the first listed."""
    listed = np.sort(LAT)
    flat = np.zeros(len(listed))
    assert top_k_score(listed, flat, 1) == pytest.approx(listed.min() / listed.max())
    assert workload_row(listed, flat)["regret1"] == pytest.approx(listed.max() / listed.min() - 1)
