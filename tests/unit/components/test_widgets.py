"""components.widgets: the Dual Path run's second estimate in its status line, once both answers are generated."""

from __future__ import annotations

from types import SimpleNamespace

from components.widgets import rest_of_run
from core.engine import PARAMETRIC, RETRIEVAL
from core.engine import estimate as module
from core.engine.estimate import DUAL_PATH, GENERATED_TOKEN, CostMeter, Work


def test_the_status_line_says_what_is_left_once_the_answers_length_is_known(monkeypatch) -> None:
    meter = CostMeter()
    monkeypatch.setattr(module, "METER", meter)
    prepared = SimpleNamespace(retrieval=SimpleNamespace(ids=[1] * 30), parametric=SimpleNamespace(ids=[1] * 20))
    assert rest_of_run("h", prepared, {RETRIEVAL: 12, PARAMETRIC: 64}, 20.0) == "", "nothing known: nothing said"
    meter.observe("h", GENERATED_TOKEN, 1.0, 10)
    meter.observe_run("h", DUAL_PATH, 4.0, Work(steps=10))
    line = rest_of_run("h", prepared, {RETRIEVAL: 12, PARAMETRIC: 64}, 20.0)
    assert line.startswith(" (answers in 20 s; the rest ") and line.endswith(" on this machine)"), line
