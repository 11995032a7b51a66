"""Shared AppTest helpers: the app's paths, opening a script with no exception, and pointing the app's cached
model loader (``components.page``) at another model, such as the tiny random Llama of ``tests/conftest.py``.

The plain helpers are imported by the test modules (``from tests.app.conftest import ok, open_script``); the
fixtures are found by pytest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from components import page
from core.model.handle import ModelHandle

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")


def ok(at: AppTest) -> AppTest:
    """``at`` itself, after checking that its last run raised no exception."""
    assert not at.exception, at.exception
    return at


def open_script(path: str, timeout: float) -> AppTest:
    """The script at ``path`` (the app or one page) run once in AppTest, with no exception."""
    return ok(AppTest.from_file(path, default_timeout=timeout).run())


def evaluate_upload(data: bytes, detectors: list[str], *, batch: int | None = None, timeout: float = 180) -> AppTest:
    """The Evaluate page after scoring an uploaded CSV with ``detectors`` (4-token answers, T = 4): every row
    must have been scored."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.session_state["ror.s.max_new_tokens"] = 4
    at.session_state["ror.s.score_window"] = 4
    ok(at.run())
    ok(at.switch_page("pages/9_Evaluate.py").run())
    at.radio(key="ror.w.eval.source").set_value("Upload a CSV").run()
    ok(at.file_uploader(key="ror.eval.upload").set_value(("rows.csv", data, "text/csv")).run())
    at.multiselect(key="ror.w.eval.detectors").set_value(detectors).run()
    if batch is not None:
        at.slider(key="ror.w.eval.batch").set_value(batch).run()
    ok(at.button(key="ror.eval.job.main.run").click().run())
    assert at.session_state["ror.eval.job.main"].n_done == data.count(b"\n") - 1, [e.value for e in at.error]
    return at


@pytest.fixture
def use_loader(monkeypatch) -> Iterator[Callable[[Callable[..., ModelHandle]], None]]:
    """``use_loader(load)``: the app loads its model with ``load(spec, revision=...)`` instead of ``load_model``.

    The loader's cache is cleared on every call and after the test, so other page tests still get the
    embedded model.
    """

    def use(load: Callable[..., ModelHandle]) -> None:
        monkeypatch.setattr(page, "load_model", load)
        page._load_handle.clear()

    yield use
    page._load_handle.clear()


@pytest.fixture
def tiny_app(tiny_handle, use_loader) -> ModelHandle:
    """The app's model is the tiny random Llama (a run takes a second, not minutes); returns its handle."""
    use_loader(lambda *args, **kwargs: tiny_handle)
    return tiny_handle


@pytest.fixture
def tiny_own_tau(tiny_app, monkeypatch, tmp_path) -> ModelHandle:
    """:func:`tiny_app` with a τ(L) of its own, stored where ``calibrate-model`` stores one (in a fresh cache): the
    bundled τ(L)'s numbers, made for the tiny model. No model borrows another's τ, so a test of a τ in force needs
    one; returns the handle."""
    from dataclasses import replace

    from core.engine.threshold import EMBEDDED_THRESHOLD, Threshold
    from core.model import calibration_store

    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    folder = calibration_store.claim_folder(tiny_app, "chat")
    replace(Threshold.load(EMBEDDED_THRESHOLD), model=tiny_app.info.name).save(folder / calibration_store.TAU_FILE)
    return tiny_app


@pytest.fixture
def model_never_ready(use_loader, tiny_handle, monkeypatch):
    """The model is still loading: a page stops where it first waits for it (what it drew until then stays)."""
    release = threading.Event()

    def slow(spec=None, revision=None, **kw):
        release.wait(60)
        return tiny_handle

    def first_wait(spec, revision):
        st.stop()

    use_loader(slow)
    monkeypatch.setattr(page._load_handle, "wait", first_wait)
    yield
    release.set()
