"""Activation patching scored like the sweeps (tiny random Llama)."""

from __future__ import annotations

import json

import pytest

from core.engine import DualPathSettings
from core.methods import ablation

Q, C = "Where is the tower?", "The tower stands in Quillmere."


def _settings(n: int = 6) -> DualPathSettings:
    return DualPathSettings(max_new_tokens=n, score_window=n, top_k=5)


def test_patching_scores_and_a_last_layer_patch(tiny_handle):
    out = ablation.patching_scores(tiny_handle, Q, C, _settings(), "2", max_new_tokens=6)
    assert out["intervention"]["stats"]["patched_sites"] == 1
    assert out["delta_z"] == pytest.approx(out["patched"]["z"] - out["clean"]["z"])
    json.dumps(out, allow_nan=False)
