"""core.evaluation.pac: the PAC sample size with γ as RePCS Lemma III.3 uses it and with the effective T
(issue 11)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.evaluation.calibration import calibrate_records
from core.evaluation.pac import pac_summary, pac_table


def _n(gamma: float, T: float, delta: float, eps: float) -> int:
    return math.ceil(8 * gamma * gamma * T * math.log(2 / eps) / (delta * delta))


def test_pac_table_by_hand():
    L = np.array([4, 10, 12, 30, 64])
    pac = pac_table(2.0, 9.0, 5.0, 64, L, 0.05)
    assert pac["T"] == {"nominal": 64.0, "max": 64.0, "mean": 24.0, "median": 12.0}
    assert pac["n"]["realised_token"]["nominal"] == _n(2.0, 64, 5.0, 0.05)
    assert pac["n"]["vocabulary"]["nominal"] == _n(9.0, 64, 5.0, 0.05)
    assert pac["n"]["vocabulary"]["mean"] == _n(9.0, 24.0, 5.0, 0.05)
    assert pac["n"]["realised_token"]["median"] == _n(2.0, 12.0, 5.0, 0.05)
    assert pac_table(2.0, None, -1.0, 64, L)["n"]["vocabulary"]["nominal"] is None  # no gap, no vocabulary γ


def _records() -> list[dict]:
    rows = []
    for i in range(12):
        mem = i % 2 == 0
        rows.append(
            {
                "row": i + 1,
                "label": "memorized" if mem else "grounded",
                "repcs_score": 2.0 + 0.1 * i if mem else 20.0 + i,
                "max_abs_log_ratio": 1.0 + 0.1 * i,
                "max_abs_log_ratio_vocab": 10.0 + i,
                "n_tokens": 8 + i,
            }
        )
    return rows


def test_pac_in_calibration_report_and_summary():
    recs = _records()
    delta = np.mean([r["repcs_score"] for r in recs[1::2]]) - np.mean([r["repcs_score"] for r in recs[0::2]])
    summary = pac_summary(recs, 64)
    assert summary["gamma"] == {"vocabulary": 21.0, "realised_token": pytest.approx(2.1)}
    assert summary["T"]["median"] == pytest.approx(np.median([8 + i for i in range(12)]))
    assert summary["n"]["vocabulary"]["nominal"] == _n(21.0, 64, delta, 0.05)
    report = calibrate_records(recs, T=64, model="m", mode="paper")
    assert report.pac["n"]["vocabulary"]["mean"] == _n(21.0, np.mean([8 + i for i in range(12)]), delta, 0.05)
    assert report.pac["gamma"]["realised_token"] == pytest.approx(report.gamma)
    # records of an older run without the vocabulary γ: that reading is undefined, not zero
    old = [{k: v for k, v in r.items() if k != "max_abs_log_ratio_vocab"} for r in recs]
    assert pac_summary(old, 64)["n"]["vocabulary"]["nominal"] is None
