"""Fixtures shared by the method tests: one tiny dual-path run."""

from __future__ import annotations

import pytest

from core.engine import run_dual_path
from core.engine.settings import DualPathSettings

SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6)


@pytest.fixture(scope="module")
def tiny_result(tiny_handle):
    """The tiny model's dual-path run of one short query and context (6 new tokens, T = 6)."""
    return run_dual_path(tiny_handle, "Who wrote the note?", "The note was written by Ada on Tuesday.", SETTINGS)
