"""core.engine.settings (issue 17, hardening): settings read back from a dict refuse bad values instead of defaulting
silently (11)."""

from __future__ import annotations

import pytest

from core.engine import DualPathSettings

# ----------------------------------------------------------------------------------------------------------
# 11. settings from a dict


@pytest.mark.parametrize(
    "bad",
    [
        {"score_window": 0},
        {"max_new_tokens": 0},
        {"max_new_tokens": None},
        {"max_new_tokens": "64"},
        {"max_new_tokens": True},
        {"template": ""},
        {"template": None},
        {"top_k": 1.5},
        {"force_length": 1},
    ],
)
def test_settings_from_a_dict_refuse_bad_values(bad):
    with pytest.raises(ValueError):
        DualPathSettings.from_dict({**DualPathSettings().to_dict(), **bad})


def test_settings_from_a_dict_still_default_missing_keys_and_ignore_unknown_ones():
    assert DualPathSettings.from_dict({"top_k": 7, "from_the_future": 1}) == DualPathSettings(top_k=7)
