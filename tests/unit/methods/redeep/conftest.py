"""Fixtures of the ReDeEP tests: one torch thread (``tiny_result`` is in ``tests/unit/methods/conftest.py``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    """Every module here runs on one torch thread (``tests/conftest.py``)."""
