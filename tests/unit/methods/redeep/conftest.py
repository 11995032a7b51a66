"""Fixtures of the ReDeEP tests: one torch thread and one tiny dual-path run."""

from __future__ import annotations

import pytest

from core.engine import run_dual_path
from core.engine.settings import DualPathSettings

SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6)


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    """Every module here runs on one torch thread (``tests/conftest.py``)."""


@pytest.fixture(scope="module")
def tiny_result(tiny_handle):
    return run_dual_path(tiny_handle, "Who wrote the note?", "The note was written by Ada on Tuesday.", SETTINGS)
