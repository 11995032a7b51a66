"""core.evaluation.sample_size (issue 14): the sample-size maths behind the Evaluate page's small-sample warning."""

from __future__ import annotations

import math

import pytest

from core.evaluation.sample_size import auc_standard_error, rows_for_auc_ci, small_sample_message


def test_auc_standard_error_matches_a_hand_computation():
    # A = 0.8, 10 + 10 rows: Q1 = 0.8/1.2, Q2 = 1.28/1.8; var = (0.16 + 9(Q1 − 0.64) + 9(Q2 − 0.64)) / 100
    q1, q2 = 0.8 / 1.2, 1.28 / 1.8
    expected = math.sqrt((0.16 + 9 * (q1 - 0.64) + 9 * (q2 - 0.64)) / 100)
    assert auc_standard_error(0.8, 10, 10) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.10198, abs=1e-4)
    with pytest.raises(ValueError):
        auc_standard_error(1.2, 3, 3)


@pytest.mark.parametrize("auc", [0.6, 0.75, 0.9])
def test_rows_for_auc_ci_is_the_smallest_balanced_set_that_reaches_the_width(auc):
    n = rows_for_auc_ci(auc, 0.05)
    assert 1.96 * auc_standard_error(auc, n, n) <= 0.05 < 1.96 * auc_standard_error(auc, n - 1, n - 1)
    assert rows_for_auc_ci(1.0) == rows_for_auc_ci(0.9), "a perfect AUC on few rows plans like 0.9"


def test_small_sample_message():
    message = small_sample_message(3, 3, 1.0)
    assert (
        message.startswith("Only 3 memorized and 3 grounded rows") and f"about {rows_for_auc_ci(0.9)} rows" in message
    )
    assert small_sample_message(500, 500, 0.9) is None
