"""Fixtures shared by the unit tests: the command line on the tiny random Llama."""

from __future__ import annotations

import pytest

import core.cli.common


@pytest.fixture
def cli_model(tiny_handle, monkeypatch):
    """The command line (``core.cli.main``) loads the tiny random Llama instead of a real model; returns it."""
    monkeypatch.setattr(core.cli.common, "load_model", lambda *args, **kwargs: tiny_handle)
    return tiny_handle
