"""Ablations for a newcomer (issue 14): graded defaults, degenerate answers flagged next to the score, the
verdict in the shared wording, and a progress bar with an estimate for every run (tiny random model)."""

from __future__ import annotations

from components import keys
from components.ablation_controls import DEFAULT_EPS, DEFAULT_GRID
from core.engine.verdict import DISPLAY
from core.methods.ablation.degenerate import degenerate_paths
from tests.app.conftest import ROOT, ok, open_script

PAGE = str(ROOT / "pages" / "5_Ablations.py")
TIMEOUT = 120
Q, C = "Where is the tower?", "The tower stands in Quillmere."


def test_defaults_flags_progress_and_estimates(tiny_app) -> None:
    at = open_script(PAGE, TIMEOUT)
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(6).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input(Q)
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input(C).run()
    ok(at.button(key=keys.ABLATE_RUN_CLEAN).click().run())
    assert at.selectbox(key=keys.widget_key(keys.ABLATE_PRESET)).value == "late"
    assert at.slider(key=keys.widget_key(keys.ABLATE_EPS)).value == DEFAULT_EPS == 0.05
    assert DEFAULT_GRID == [0.0, 0.02, 0.05, 0.1, 0.25]
    captions = [c.value for c in at.caption]
    assert sum("on this machine" in c for c in captions) >= 2, "estimates before the dose–response and the sweep"
    before_noise = [c for c in captions if c.startswith("Both answers again, up to 6 tokens each: ")]
    assert len(before_noise) == 2 and all("on this machine" in c for c in before_noise), "noise and patching too"

    ok(at.button(key=keys.ABLATE_RUN_NOISE).click().run())
    bars = [p.proto.text for p in at.get("progress")]
    assert any(text.startswith("Done in") for text in bars), bars
    runs = at.session_state[keys.ABLATE_RESULTS]
    perturbed = next(v for v in runs.values() if hasattr(v, "retrieval") and "intervention" in v.extras)
    metric = next(m for m in at.metric if m.label == "Verdict")
    assert metric.value in DISPLAY.values(), "the shared wording alone (a flag goes in the delta, not the value)"
    flagged = degenerate_paths(perturbed)  # both paths are checked (issue 26)
    warned = [w.value for w in at.warning if "degenerate" in w.value]
    assert len(warned) == len(flagged) and all(any(f"perturbed {p} answer" in w for w in warned) for p in flagged)
    assert (metric.delta == "degenerate answer") == bool(flagged)
