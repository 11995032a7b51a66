"""components.agreement's links: a costly detector that has run is named once, not twice ("CRM L1, CRM L1")."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _links_after_crm_l1_ran() -> None:
    from unittest.mock import patch

    import streamlit as st

    from components.agreement import _links
    from core.detectors.agreement import Agreement, CostlyDetector, DetectorVerdict

    ran = DetectorVerdict("crm_l1", "CRM L1", "memorized", 0.2, 0.3, "bundled", "read", "generate")
    with patch.object(st, "page_link"):  # a function script has no pages/ folder beside it to link to
        _links(Agreement(verdicts=[ran], costly=[CostlyDetector("crm_l1", "CRM L1", "generate", 10.0)]))


def test_a_detector_that_ran_is_listed_once() -> None:
    at = AppTest.from_function(_links_after_crm_l1_ran, default_timeout=60).run()  # imports the app under load
    assert not at.exception, at.exception
    line = next(c.value for c in at.caption if c.value.startswith("Each detector's page"))
    assert line.count("CRM L1") == 1, line


def test_each_detector_links_to_the_page_that_explains_it() -> None:
    from components.agreement import page_for

    assert page_for("lookback")[1] == "Attention" and page_for("lookback_mean")[1] == "Attention"
    assert page_for("redeep_pks")[1] == "Layer trajectories" and page_for("crm_lts")[1] == "Layer trajectories"
    assert page_for("ppl")[1] == "Evaluate"
