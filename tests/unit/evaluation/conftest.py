"""Fixtures of the evaluation tests: a small labeled CSV of made-up facts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def facts_csv(tmp_path) -> Callable[..., Path]:
    """``facts_csv(n, step, memorized)``: ``tmp_path / "d.csv"`` with ``n`` rows ``Q{i}?,Fact {i} is {i * step}.``,
    labeled ``memorized`` where ``memorized(i)`` is true and ``grounded`` elsewhere."""

    def write(n: int, step: int, memorized: Callable[[int], bool]) -> Path:
        rows = [f"Q{i}?,Fact {i} is {i * step}.,{'memorized' if memorized(i) else 'grounded'}" for i in range(n)]
        path = tmp_path / "d.csv"
        path.write_text("query,context,label\n" + "\n".join(rows) + "\n")
        return path

    return write
