"""components.panels (issue 14): every page leads with plain words, then the definition collapsed, then the source."""

from __future__ import annotations

from tests.app.conftest import APP, ok, open_script

DUAL_PATH = "pages/1_Dual_Path.py"
TIMEOUT = 120


def _dual_path():
    at = open_script(APP, TIMEOUT)
    return ok(at.switch_page(DUAL_PATH).run())


def test_page_intro_leads_with_a_plain_sentence_then_the_definition_collapsed(tiny_app) -> None:
    at = _dual_path()
    first = at.main.markdown[0].value
    assert first.startswith("The model answers your question twice") and "KL" not in first, "plain words first"
    (precise,) = [e for e in at.expander if e.label == "Precisely"]
    assert not precise.proto.expanded and r"\mathrm{KL}_t" in precise.markdown[0].value, "rendered as math"
    assert any(c.value.startswith("RePCS (2025)") for c in at.caption), "then the citation"


PAGES_WITH_INTROS = (
    "pages/1_Dual_Path.py",
    "pages/2_Attention.py",
    "pages/3_Layer_Trajectories.py",
    "pages/4_Vocabulary_Lens.py",
    "pages/5_Ablations.py",
    "pages/6_Self_Critique.py",
    "pages/7_Source_Attribution.py",
    "pages/8_RADAR.py",
    "pages/9_Evaluate.py",
    "pages/10_Audit_Log.py",
)


def test_every_page_leads_with_plain_words_then_the_definition_then_the_source(tiny_app) -> None:
    at = open_script(APP, TIMEOUT)
    for page in PAGES_WITH_INTROS:
        ok(at.switch_page(page).run())
        first = at.main.markdown[0].value
        assert not any(sign in first for sign in ("§", "=", "arXiv", "eq.")), (page, first)
        assert first.endswith((".", "?")) and len(first.split()) >= 12, (page, first)
        precise = [e for e in at.expander if e.label == "Precisely"]
        assert len(precise) == 1 and not precise[0].proto.expanded, page
        definition = precise[0].markdown[0].value
        assert len(definition.split()) >= 20, (page, "the definition is in the collapsed box")
        assert any(("(2025)" in c.value or "arXiv" in c.value) for c in at.main.caption), (page, "the source")
