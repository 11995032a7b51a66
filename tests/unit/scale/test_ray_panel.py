"""The Evaluate page's Ray panel (AppTest): absent without READ_OR_RECALL_RAY_ADDRESS; with it, the cluster's
workers, and a run on the cluster whose job the result tabs then show."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from components import page
from components.ray_panel import ADDRESS_ENV, ray_address

ROOT = Path(__file__).resolve().parents[3]
APP = str(ROOT / "app.py")
PAGE = "pages/9_Evaluate.py"
MAIN = "ror.eval.job.main"
TIMEOUT = 600
FOUR = (
    b"query,context,label\n"
    b"What is the capital of France?,Paris is the capital of France.,memorized\n"
    b"Who wrote Hamlet?,Hamlet is a tragedy by William Shakespeare.,memorized\n"
    b"What is the capital of Veltria?,The capital of Veltria is Marrowgate.,grounded\n"
    b"Who founded the Orrin Guild?,The Orrin Guild was founded by Tamsin Vell.,grounded\n"
)


@pytest.fixture
def folder_app(monkeypatch, tiny_local):
    """The app's model is the tiny Llama loaded from its folder (so Ray workers can load the same model)."""
    monkeypatch.setattr(page, "load_model", lambda *args, **kwargs: tiny_local)
    page._load_handle.clear()
    yield tiny_local
    page._load_handle.clear()


def _evaluate_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["ror.s.max_new_tokens"] = 4
    at.session_state["ror.s.score_window"] = 4
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return at


def _ray_button(at: AppTest):
    return next((b for b in at.button if b.label == "Run the evaluation on the Ray cluster"), None)


def test_no_address_no_panel(monkeypatch, folder_app):
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    assert ray_address() is None
    at = _evaluate_page()
    assert _ray_button(at) is None
    assert not any("Ray cluster" in m.value for m in at.markdown)


@pytest.mark.slow
def test_panel_lists_workers_and_runs_on_the_cluster(monkeypatch, ray_session, folder_app):
    monkeypatch.setenv(ADDRESS_ENV, "auto")  # Ray is already running in this process: the panel reuses it
    at = _evaluate_page()
    assert any("Ray cluster" in m.value for m in at.markdown)
    nodes = next(d.value for d in at.dataframe if "CPUs" in d.value.columns)
    assert nodes["CPUs"].sum() == 2
    at.radio(key="ror.w.eval.source").set_value("Upload a CSV").run()
    at.file_uploader(key="ror.eval.upload").set_value(("four.csv", FOUR, "text/csv")).run()
    _ray_button(at).click().run()
    assert not at.exception, at.exception
    job = at.session_state[MAIN]
    assert job.status == "done" and job.n_done == 4
    assert any("rows scored by" in s.value for s in at.success)


def test_workers_load_the_revision_the_app_loaded(tiny_handle):
    """Issue 25 item 9: the panel built the workers' spec without the revision, so they loaded the hub's default
    branch instead of the allow-listed (pinned) revision."""
    from dataclasses import replace
    from types import SimpleNamespace

    from components.ray_panel import _model_spec, loaded_revision

    def handle(name: str, source: str):
        return SimpleNamespace(info=replace(tiny_handle.info, name=name, source=source))

    pinned = handle("org/a", "huggingface hub org/a@v2")
    assert loaded_revision(pinned) == "v2"
    spec = _model_spec(pinned)
    assert (spec.model, spec.revision) == ("org/a", "v2")
    assert _model_spec(handle("org/a", "huggingface hub org/a")).revision is None
    assert _model_spec(handle("/models/x", "local folder /models/x")).revision is None
