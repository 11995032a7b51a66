"""SMA maths (core.methods.sma.maths): the response score by hand, ADS, the three-way labels, mean |ADS|."""

from __future__ import annotations

import numpy as np
import pytest

from core.methods.sma import NON_MEMBER, PRETRAINED, RETRIEVED, ads, classify_units, mean_abs_ads, response_score


def test_response_score_by_hand() -> None:
    # γ₁ · Len(ŷ⁽ⁱ⁾)/Len(ŷ) + γ₂ · Sim: an answer of 6 tokens against a 8-token reference, similarity 0.75
    assert response_score(6 / 8, 0.75, 0.5, 0.5) == pytest.approx(0.5 * 0.75 + 0.5 * 0.75)
    assert response_score(2.0, -0.2, 0.3, 1.5) == pytest.approx(0.6 - 0.3)


def test_three_way_labels() -> None:
    beta_first = np.array([0.2, 0.1, 0.0, 0.0, 0.0, 0.0, 0.05])
    diff = np.array([-0.5, 0.0, 0.05, -0.1, 0.1, 0.3, -0.3])
    assert classify_units(beta_first, diff) == [
        PRETRAINED, PRETRAINED, NON_MEMBER, NON_MEMBER, RETRIEVED, RETRIEVED, RETRIEVED,
    ]  # fmt: skip
    assert classify_units(beta_first, diff, tau1=-0.1, tau2=0.1) == classify_units(beta_first, diff), "band order"
    assert classify_units(beta_first, diff, tau=10.0)[:2] == [RETRIEVED, NON_MEMBER]
    with pytest.raises(ValueError):
        classify_units(np.zeros(2), np.zeros(3))


def test_ads_and_mean_abs_ads() -> None:
    on, off = np.array([0.3, -0.1, 0.2]), np.array([0.1, 0.1, 0.0])
    np.testing.assert_allclose(ads(on, off), [0.2, -0.2, 0.2])
    assert mean_abs_ads(ads(on, off), np.array([True, True, False])) == pytest.approx(0.2)
    assert mean_abs_ads(ads(on, off), np.zeros(3, dtype=bool)) == 0.0
    with pytest.raises(ValueError, match="same length"):
        ads(np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="same shape"):
        mean_abs_ads(np.zeros(2), np.zeros(3, dtype=bool))
