"""core.engine.scoring.rejudge: a new τ re-decides a stored result from its own Z and L, exactly as a fresh run
under that τ would (issue 26 items 1 and 9: no regeneration, no stale verdict)."""

from __future__ import annotations

import pytest

from core.engine import DualPathSettings, run_dual_path
from core.engine.scoring import rejudge
from core.engine.threshold import LengthTau, Threshold
from core.engine.verdict import READ, RECALLED, UNCALIBRATED

VERDICT_FIELDS = (
    "threshold",
    "threshold_source",
    "repcs_verdict",
    "repcs_verdict_reason",
    "tau_band",
    "tau_mode",
    "warnings",
    "axes",
)
SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6, top_k=5, force_length=True)


@pytest.fixture(scope="module")
def runs(tiny_handle):
    name = tiny_handle.info.name
    low = Threshold(tau=1e-9, alpha=0.05, T=6, model=name, source="low")
    result = run_dual_path(tiny_handle, "Who wrote it?", "Ada wrote it.", SETTINGS, threshold=low, threshold_source="a")
    high = Threshold(tau=result.repcs_score + 1.0, alpha=0.05, T=6, model=name, source="high")
    length = Threshold(
        tau=result.repcs_score,
        alpha=0.05,
        T=64,  # another T: the mismatch warning must appear
        model=name,
        source="length",
        length_tau=LengthTau(intercept=0.0, slope=0.5, alpha=0.05, L_min=1, L_max=64, n=40),
    )
    fresh = {
        key: run_dual_path(tiny_handle, "Who wrote it?", "Ada wrote it.", SETTINGS, threshold=th, threshold_source=key)
        for key, th in (("high", high), ("length", length))
    }
    return result, {"high": high, "length": length}, fresh


def test_rejudge_gives_exactly_the_fields_a_fresh_run_under_that_tau_gives(runs, tiny_handle):
    result, thresholds, fresh = runs
    assert result.repcs_verdict == READ
    for key, threshold in thresholds.items():
        again = rejudge(result, threshold, key, tiny_handle.tokenizer)
        for name in VERDICT_FIELDS:
            assert getattr(again, name) == getattr(fresh[key], name), (key, name)
        assert again.repcs_score == result.repcs_score and again.answer_token_ids == result.answer_token_ids
    assert rejudge(result, thresholds["high"], "high").repcs_verdict == RECALLED
    assert any(
        w.startswith("τ was calibrated with T = 64") for w in rejudge(result, thresholds["length"], "x").warnings
    )


def test_rejudge_under_the_same_tau_is_the_same_object_and_none_is_uncalibrated(runs, tiny_handle):
    result, _, fresh = runs
    same = fresh["high"]
    none = rejudge(same, None, None)
    assert none.repcs_verdict == UNCALIBRATED and none.threshold is None
    assert none.threshold_source == "no threshold available" and none.axes == same.axes, "the headline is kept"
    high = Threshold(tau=result.repcs_score + 1.0, alpha=0.05, T=6, model=tiny_handle.info.name, source="high")
    assert rejudge(same, high, "high", tiny_handle.tokenizer) is same
    back = rejudge(rejudge(same, None, None), high, "high", tiny_handle.tokenizer)
    assert all(getattr(back, n) == getattr(same, n) for n in VERDICT_FIELDS)
