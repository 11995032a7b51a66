"""The Dual Path page and the one calibration door (issue 41 A): a model whose display name was calibrated but whose
file, revision or template was not gets *Not calibrated for this model*; a verdict says which model and record it
belongs to, a verdict of another model is labeled after a switch, the model survives a reload (URL), the suggested
command is the ``--model`` value ``--help`` documents, and a page run decides the headline once (tiny models)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

import core.engine.axes as axes_module
from components import keys
from components.text import escape_markdown
from tests.app.conftest import APP, ok
from tests.calibration_fakes import GGUF_PATH, gguf_source, same_model_from, write_fake_calibration

PAGE = "pages/1_Dual_Path.py"
TIMEOUT = 120
OTHER = "/models/other.gguf"


def _choose(at: AppTest, spec: str | None, revision: str = "") -> None:
    """The sidebar's model: the embedded one (``None``) or another by its ``--model`` value."""
    at.session_state[keys.store_key(keys.MODEL_CHOICE)] = "embedded" if spec is None else "custom"
    if spec is not None:
        at.session_state[keys.store_key(keys.MODEL_ID)] = spec
        at.session_state[keys.store_key(keys.MODEL_REVISION)] = revision


def _run(at: AppTest) -> AppTest:
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(3).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere.")
    return ok(at.button(key=keys.RUN).click().run())


def _titles(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("#### ")]


def _texts(at: AppTest) -> str:
    return " ".join(str(e.value) for e in [*at.markdown, *at.caption, *at.warning])


@pytest.fixture
def models(tiny_handle, use_loader, monkeypatch, tmp_path):
    """``/models/model.gguf`` was calibrated as file a; the loader now finds file b there (another sha256),
    ``owner/tiny`` at two revisions (rev-1 calibrated) and ``/models/other.gguf`` (another model)."""
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    file_a = same_model_from(tiny_handle, gguf_source("a" * 64))
    write_fake_calibration(file_a, "chat")
    rev1 = same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-1", name="owner/tiny")
    write_fake_calibration(rev1, "chat")
    found = {
        (GGUF_PATH, None): file_a,
        ("/models/replaced.gguf", None): same_model_from(tiny_handle, gguf_source("b" * 64)),
        ("owner/tiny", "rev-1"): rev1,
        ("owner/tiny", "rev-2"): same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-2", name="owner/tiny"),
        (OTHER, None): same_model_from(tiny_handle, gguf_source("d" * 64, OTHER), name="Other model"),
    }
    use_loader(lambda spec=None, revision=None, **kw: found.get((spec, revision), tiny_handle))
    return found


@pytest.mark.parametrize(
    ("spec", "revision", "template"),
    [("/models/replaced.gguf", "", "auto"), ("owner/tiny", "rev-2", "auto"), (GGUF_PATH, "", "A")],
    ids=["another file at the same path", "another revision", "another template"],
)
def test_another_file_revision_or_template_is_not_calibrated(models, spec, revision, template) -> None:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    _choose(at, spec, revision)
    at.session_state[keys.store_key(keys.TEMPLATE)] = template
    ok(ok(at.run()).switch_page(PAGE).run())
    _run(at)
    assert _titles(at) and _titles(at)[0] == "#### Not calibrated for this model", _titles(at)
    tau = next(m for m in at.metric if m.label.startswith("Threshold"))
    assert tau.value == "none"
    assert escape_markdown(models[(GGUF_PATH, None)].slug + "/chat") not in _texts(at)  # not the calibrated record


def test_the_calibrated_file_is_calibrated_and_its_verdict_names_its_record(models) -> None:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    _choose(at, GGUF_PATH)
    ok(ok(at.run()).switch_page(PAGE).run())
    _run(at)
    assert _titles(at) and "Not calibrated" not in _titles(at)[0], _titles(at)
    key = models[(GGUF_PATH, None)].slug + "/chat"
    owner = escape_markdown(f"Verdict of {models[(GGUF_PATH, None)].info.name} · calibration {key}")
    assert owner in [c.value for c in at.caption]


def test_a_switch_labels_the_other_models_verdict_and_a_reload_keeps_the_model(models) -> None:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    _choose(at, GGUF_PATH)
    ok(ok(at.run()).switch_page(PAGE).run())
    _run(at)
    _choose(at, OTHER)
    ok(at.run())
    assert any("This verdict belongs to" in w.value and "Other model" in w.value for w in at.warning), [
        w.value for w in at.warning
    ]
    assert not _titles(at)  # the other model's headline is not shown as this one's
    assert at.query_params["m"] in (OTHER, [OTHER])
    command = escape_markdown(f"python -m core calibrate-model --model {OTHER}")
    assert command in _texts(at), "the suggested command is the --model value, not the display name"

    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)  # a reload: a new session with the same URL
    fresh.query_params["m"] = OTHER
    ok(ok(fresh.run()).switch_page(PAGE).run())
    assert fresh.text_input(key=keys.widget_key(keys.MODEL_ID)).value == OTHER
    assert command in _texts(fresh)


def test_a_page_run_decides_the_headline_once(models, monkeypatch) -> None:
    counted: list[int] = []
    real = axes_module.reliance_axis  # called by the headline's decision only (the swap test locates its own span)
    monkeypatch.setattr(axes_module, "reliance_axis", lambda *a, **k: counted.append(1) or real(*a, **k))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    _choose(at, GGUF_PATH)
    ok(ok(at.run()).switch_page(PAGE).run())
    _run(at)
    assert _titles(at) and len(counted) == 1  # the run, its page (headline, card, export) and the URL: one decision
    ok(at.run())  # the page read again: the stored result's headline, not a new decision
    assert len(counted) == 1
