"""components.threshold_state on the Dual Path page: one τ in force everywhere, at every moment (issue 26 items
1, 5 and 9). Changing τ re-decides the stored run in place from the Z it already has — the headline, the τ metric
and the agreement table's RePCS row and summary agree at once — without running the model again.

On the tiny random Llama (``tiny_app``); the session's τ is set as the Evaluate page's "Use this τ" sets it.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest

import components.widgets
from components import keys
from core.engine.threshold import Threshold
from core.engine.verdict import DISPLAY, READ, RECALLED
from tests.app.conftest import APP, ok, open_script

DUAL_PATH = "pages/1_Dual_Path.py"
TIMEOUT = 180
Q, C = "Where is the tower?", "The tower stands in Quillmere."
EVALUATE_SOURCE = "calibrated on the Evaluate page (bundled probes)"


def _repcs_row(at):
    for frame in at.dataframe:
        df = frame.value
        if "verdict" in df.columns and "threshold from" in df.columns:
            return df[df["detector"] == "RePCS"].iloc[0]
    raise AssertionError("no agreement table on the page")


def _headline(at) -> str:
    boxes = [b.value for b in [*at.warning, *at.success, *at.info] if b.value.startswith("**")]
    assert len(boxes) == 1, boxes
    return boxes[0]


def _summary(at) -> str:
    """The context-reliance group's summary line (RePCS' group; issue 23 part 3)."""
    (line,) = [i.value for i in at.info if i.value.startswith("Context reliance: ")]
    return line


def _use_tau(at, model: str, tau: float) -> None:
    threshold = Threshold(tau=tau, alpha=0.05, T=4, model=model, source=EVALUATE_SOURCE)
    at.session_state[keys.THRESHOLDS] = {model: {"threshold": asdict(threshold), "source": EVALUATE_SOURCE}}


def _run_once():
    """The Dual Path page after one run of (Q, C) with 4 new tokens."""
    at = open_script(APP, TIMEOUT)
    ok(at.switch_page(DUAL_PATH).run())
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input(Q)
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input(C)
    return ok(at.button(key=keys.RUN).click().run())


@pytest.fixture
def runs(monkeypatch):
    calls = []
    real = components.widgets.run_dual_path

    def counted(*args, **kwargs):
        calls.append(kwargs.get("threshold"))
        return real(*args, **kwargs)

    monkeypatch.setattr(components.widgets, "run_dual_path", counted)
    return calls


def test_changing_tau_re_decides_the_run_in_place_and_the_table_follows(tiny_app, tiny_own_tau, runs) -> None:
    at = _run_once()
    assert len(runs) == 1
    (stored,) = at.session_state[keys.RESULTS].values()
    default_source, default_tau = stored.threshold_source, stored.threshold
    z = stored.repcs_score

    _use_tau(at, tiny_app.info.name, z + 15.0)  # "Use this τ": Z < τ → recalled
    ok(at.run())
    assert len(runs) == 1, "re-deciding a verdict needs no new run"
    assert _headline(at).startswith(f"**{DISPLAY[RECALLED]}**") and f"τ = {z + 15.0:.3f}" in _headline(at)
    row = _repcs_row(at)
    assert row["verdict"] == DISPLAY[RECALLED] and row["threshold from"].startswith(EVALUATE_SOURCE)
    assert float(row["threshold"]) == pytest.approx(z + 15.0, rel=1e-3)
    assert "RePCS" in _summary(at) and not any("Showing the previous run" in i.value for i in at.info)

    at.session_state[keys.THRESHOLDS] = {}  # "Back to the default τ"
    ok(at.run())
    assert len(runs) == 1
    row = _repcs_row(at)
    assert row["threshold from"].startswith(default_source) and EVALUATE_SOURCE not in row["threshold from"]
    assert float(row["threshold"]) == pytest.approx(default_tau, rel=1e-3)
    headline = _headline(at)
    assert row["verdict"] in headline, (row["verdict"], headline)
    assert DISPLAY[RECALLED] not in _summary(at) or row["verdict"] == DISPLAY[RECALLED]

    _use_tau(at, tiny_app.info.name, max(z / 2, 1e-6))  # a τ below Z: read
    ok(at.run())
    assert _headline(at).startswith(f"**{DISPLAY[READ]}**") and _repcs_row(at)["verdict"] == DISPLAY[READ]
    ok(at.button(key=keys.RUN).click().run())  # the same inputs: the stored run, under the τ in force
    assert len(runs) == 1 and _repcs_row(at)["verdict"] == DISPLAY[READ]


def test_the_tau_metric_says_which_tau_is_in_force_for_this_answer(tiny_app, tiny_own_tau, runs) -> None:
    at = _run_once()
    (stored,) = at.session_state[keys.RESULTS].values()
    labels = [m.label for m in at.metric]
    assert f"Threshold τ({stored.n_scored}), length-aware" in labels, labels  # its own τ(L), at this L
    _use_tau(at, tiny_app.info.name, 3.0)  # a τ without a length model: one constant τ
    ok(at.run())
    labels = [m.label for m in at.metric]
    assert "Threshold τ (one constant)" in labels and not any("length-aware" in label for label in labels)


def test_a_session_tau_that_fails_the_checks_is_forgotten_not_fatal(tiny_app):
    """Issue 37 C: a τ(L) that is 0 at every length (intercept −800) in the session crashed every page that asked
    for the τ in force; such a τ is now refused on upload, and one already in a session is dropped."""
    import json

    from core.engine.threshold import EMBEDDED_THRESHOLD

    data = json.loads(EMBEDDED_THRESHOLD.read_text(encoding="utf-8"))
    data["model"] = tiny_app.info.name
    data["length_tau"]["intercept"] = -800.0
    at = open_script(APP, TIMEOUT)
    at.session_state[keys.THRESHOLDS] = {tiny_app.info.name: {"threshold": data, "source": EVALUATE_SOURCE}}
    ok(at.switch_page("pages/9_Evaluate.py").run())
    assert not at.session_state[keys.THRESHOLDS], "the stored τ was forgotten"
    shown = "\n".join(c.value for c in at.caption)
    assert "Source:" in shown and "calibrated on the Evaluate page" not in shown
