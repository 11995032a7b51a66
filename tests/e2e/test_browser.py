"""The main flows in a real browser: `streamlit run app.py` driven by Playwright with Debian's chromium
(fixtures and the waiting interactions are in ``conftest.py``).

The two flows that end in a screenshot write ``screenshot.png`` (the README's picture: the answers, the headline
and the KL chart at 1280 px, :mod:`tests.e2e.readme_image`, with ``screenshot.json``, the text it shows) and
``evaluate.png`` into the ``artifacts`` folder; ``make screenshots`` runs just those and copies them to ``docs/``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e import readme_image
from tests.e2e.conftest import ROOT, RUN_TIMEOUT_MS, AppPage

SCREENSHOT = "screenshot.png"  # docs/screenshot.png after `make screenshots`
SCREENSHOT_TEXT = "screenshot.json"  # docs/screenshot.json: the text it shows (tests/unit/test_readme_images.py)
README_QUERY = "What is the capital of Veltria?"
README_CONTEXT = "The capital of the Republic of Veltria is Marrowgate."
README_TOKENS = 32
EVAL_SCREENSHOT = "evaluate.png"  # docs/evaluate.png after `make screenshots`
VERDICT = re.compile("Recalled from memory|Read from the context|Inconclusive|No threshold")
SCRIPT = "<script>alert(1)</script>"
QUERY, CONTEXT = "Query", "Context (the retrieved passage)"
MAX_TOKENS = "Max new tokens per answer"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _answers(app: AppPage) -> list[str]:
    """The texts of the two answer code blocks (the first two on the page)."""
    blocks = app.page.locator('[data-testid="stCode"]')
    return [blocks.nth(i).inner_text().strip() for i in range(2)]


def test_dual_path_flow_and_screenshot(app: AppPage, artifacts: Path) -> None:
    app.dual_path_run(README_QUERY, README_CONTEXT, max_new_tokens=README_TOKENS)

    page = app.page
    page.get_by_text(VERDICT).first.wait_for()
    assert page.get_by_text("Retrieval path (query + context)").first.is_visible()
    assert page.get_by_text("Parametric path (query only)").first.is_visible()
    answers = _answers(app)
    assert all(a and a != "…" for a in answers), answers
    page.get_by_text("The exact prompts").click()
    prompts = page.locator('[data-testid="stCode"]').filter(has_text="Republic of Veltria")
    assert prompts.count() >= 1, "the run used the context typed before clicking Run"
    page.get_by_text("The exact prompts").click()
    assert page.get_by_text("Z = Σ KL over the window").first.is_visible()
    page.locator(".js-plotly-plot").first.wait_for()
    shot = artifacts / SCREENSHOT
    width, height = readme_image.first_view(app, shot)  # what a reader sees first, at a readable size
    assert width <= readme_image.WIDTH and height <= readme_image.MAX_HEIGHT and shot.stat().st_size > 10_000
    text = readme_image.depicted(app, README_QUERY, README_CONTEXT, README_TOKENS)
    assert text["title"] and text["reason"] and text["span_line"].startswith("Answer span: “"), text
    readme_image.write_depicted(artifacts / SCREENSHOT_TEXT, text)


def test_script_input_is_inert(app: AppPage) -> None:
    dialogs: list[str] = []
    app.page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    app.dual_path_run(SCRIPT, SCRIPT, max_new_tokens=8)

    page = app.page
    page.get_by_text("The exact prompts").click()
    literal = page.locator('[data-testid="stCode"]').filter(has_text=SCRIPT)
    literal.first.wait_for()
    assert literal.count() >= 2, "both prompts show the input literally"
    assert page.locator("script", has_text="alert(1)").count() == 0, "no script element was injected"
    page.wait_for_timeout(500)
    assert dialogs == []


EVAL_CSV = (
    b"query,context,label,parametric_correct\n"
    b"What is the capital of France?,Paris is the capital of France.,memorized,true\n"
    b"Who wrote Hamlet?,Hamlet is a tragedy by William Shakespeare.,memorized,true\n"
    b"How many legs does a spider have?,Spiders are arachnids with eight legs.,memorized,true\n"
    b"What is the capital of Veltria?,The capital of Veltria is Marrowgate.,grounded,false\n"
    b"Who founded the Orrin Guild?,The Orrin Guild was founded by Tamsin Vell.,grounded,false\n"
    b"How many moons does Kessarine have?,The planet Kessarine has five moons.,grounded,false\n"
)


def test_evaluate_upload_run_and_screenshot(app: AppPage, artifacts: Path) -> None:
    """A real file upload on the Evaluate page, a run of the default detectors, the ROC figure and table."""
    page = app.page
    app.open("Evaluate", "Evaluate")
    app.set_number(MAX_TOKENS, 6)
    page.get_by_text("Upload a CSV", exact=True).click()
    app.settle()
    uploader = page.locator('[data-testid="stFileUploader"]').filter(has_text="Labeled CSV")
    uploader.locator('input[type="file"]').set_input_files(
        files=[{"name": "six_rows.csv", "mimeType": "text/csv", "buffer": EVAL_CSV}]
    )
    page.get_by_text(re.compile(r"six_rows\.csv: 6 rows · 3 memorized · 3 grounded")).wait_for()
    app.click_and_wait("Run the evaluation", page.get_by_text("6 / 6 rows scored").first)
    page.locator(".js-plotly-plot").first.wait_for(timeout=RUN_TIMEOUT_MS)
    page.locator(".js-plotly-plot text", has_text="False-positive rate").first.wait_for()
    page.get_by_role("button", name="Metrics (CSV)").wait_for()  # drawn after the figure: wait, do not race
    app.settle()
    shot = artifacts / EVAL_SCREENSHOT
    app.screenshot_whole_page(shot)
    assert shot.stat().st_size > 10_000


def test_inputs_and_settings_follow_the_user_across_pages(app: AppPage) -> None:
    """What is typed on one page is in the boxes of the next (client-side navigation, one session)."""
    page = app.page
    app.open("Dual_Path", "Dual Path")
    app.set_number(MAX_TOKENS, 9)
    app.fill(QUERY, "Who founded the Orrin Guild?")
    app.fill(CONTEXT, "The Orrin Guild was founded by Tamsin Vell.")
    for link, heading in (("Ablations", "Ablations"), ("Dual Path", "Dual Path")):
        page.get_by_role("link", name=link).first.click()
        page.get_by_role("heading", name=heading).first.wait_for()
        app.settle()
        app.fail_on_error()
        assert page.get_by_role("textbox", name=QUERY, exact=True).input_value() == "Who founded the Orrin Guild?"
        assert page.get_by_role("textbox", name=CONTEXT, exact=True).input_value() == (
            "The Orrin Guild was founded by Tamsin Vell."
        )
        assert page.get_by_role("spinbutton", name=MAX_TOKENS, exact=True).input_value() == "9"


def test_a_saved_tau_is_loaded_from_a_file(app: AppPage) -> None:
    """The Evaluate page's "Threshold in force": upload a saved τ in a real browser and apply it."""
    # A constant τ (a file without a length model, as `calibrate --tau-mode paper` or an older release writes).
    data = json.loads((ROOT / "assets" / "thresholds" / "embedded.json").read_text(encoding="utf-8"))
    data.pop("length_tau", None)
    data["tau"] = 9.42
    saved = json.dumps(data)
    page = app.page
    app.open("Evaluate", "Evaluate")
    page.get_by_text("Threshold in force").click()
    uploader = page.locator('[data-testid="stFileUploader"]').filter(has_text="A τ saved from this page")
    uploader.locator('input[type="file"]').set_input_files(
        files=[{"name": "threshold.json", "mimeType": "application/json", "buffer": saved.encode()}]
    )
    app.click_and_wait(
        "Use the loaded τ for the whole app", page.get_by_text("Threshold in force: τ = 9.420 nats (T = 64)")
    )
