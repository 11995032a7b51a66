"""DualPathSettings: validation, the dict form and reading it back (also from a result)."""

from __future__ import annotations

import pytest

from core.engine import DualPathResult, DualPathSettings, run_dual_path


def test_from_dict_round_trips_and_ignores_unknown_keys():
    s = DualPathSettings(max_new_tokens=12, score_window=8, top_k=3, template="A", force_length=True, kl_split=4)
    assert DualPathSettings.from_dict(s.to_dict()) == s
    assert DualPathSettings.from_dict({**s.to_dict(), "added_by_a_newer_version": 1}) == s
    assert DualPathSettings.from_dict({"top_k": 7}) == DualPathSettings(top_k=7)
    with pytest.raises(ValueError, match="dict"):
        DualPathSettings.from_dict(["top_k", 7])  # type: ignore[arg-type]


def test_result_run_settings_is_the_runs_settings(tiny_handle):
    s = DualPathSettings(max_new_tokens=4, score_window=3, top_k=2)
    res = run_dual_path(tiny_handle, "Where is the tower?", "The tower stands in Quillmere.", s)
    assert res.run_settings == s
    assert DualPathResult.from_json(res.to_json()).run_settings == s
