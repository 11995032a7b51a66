"""AppTest of the three internals pages: they open on the Dual Path page's last run, run the model once per
run (two instrumented forwards), and re-render from the session cache on every page switch.

The fast tests point the app's loader at the tiny random Llama of ``tests/conftest.py``; the slow ones use the
embedded model (its bundled CRM calibration, 30 layers × 9 heads).
"""

from __future__ import annotations

import pytest
import torch
from streamlit.testing.v1 import AppTest

from components import keys
from core.model.loading import handle_from_model
from tests.app.conftest import APP, open_script

ATTENTION = "pages/2_Attention.py"
TRAJECTORIES = "pages/3_Layer_Trajectories.py"
VOCABULARY = "pages/4_Vocabulary_Lens.py"
VIEWS = {ATTENTION: "Attention", TRAJECTORIES: "Layer trajectories", VOCABULARY: "Vocabulary lens"}


class ForwardCounter:
    """Counts forward calls of causal-LM models (anything with an ``lm_head``) in this process."""

    def __init__(self) -> None:
        self.n = 0
        self._handle = None

    def __enter__(self) -> ForwardCounter:
        from transformers import PreTrainedModel

        def hook(module: torch.nn.Module, args: tuple) -> None:
            if isinstance(module, PreTrainedModel) and hasattr(module, "lm_head"):
                self.n += 1

        self._handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()


pytestmark = pytest.mark.usefixtures("one_thread")


def _problems(at: AppTest) -> list[str]:
    return [str(e.value) for e in at.exception] + [str(e.value) for e in at.error]


def _run_dual_path(at: AppTest, max_new_tokens: int = 6) -> None:
    at.switch_page("pages/1_Dual_Path.py").run()
    at.number_input(key="ror.w.max_new_tokens").set_value(max_new_tokens)
    at.text_area(key="ror.w.query").input("What is the capital of Veltria?")
    at.text_area(key="ror.w.context").input("The capital of the Republic of Veltria is Marrowgate, a port city.")
    at.run()
    at.button(key="ror.run").click().run()
    assert not _problems(at)


@pytest.mark.slow
def test_pages_before_any_run_point_to_the_dual_path_page():
    at = open_script(APP, 120)
    with ForwardCounter() as forwards:
        for page in (ATTENTION, TRAJECTORIES, VOCABULARY):
            at.switch_page(page).run()
            assert not _problems(at), page
            assert any("No run yet" in str(i.value) for i in at.info), page
    assert forwards.n == 0


@pytest.mark.slow
def test_internals_pages_open_on_the_last_run_and_switch_without_model_calls():
    at = open_script(APP, 180)
    with ForwardCounter() as forwards:
        _run_dual_path(at)
        assert forwards.n > 0  # the dual-path run itself

        start = forwards.n
        at.switch_page(ATTENTION).run()
        assert not _problems(at)
        assert forwards.n - start == 2  # one instrumented forward per path, computed once
        labels = {m.label: m.value for m in at.metric}
        assert labels["Specialized heads (retrieval path)"].endswith("of 270")  # 30 layers × 9 heads
        assert len(at.get("plotly_chart")) == 4  # two entropy maps, their difference, context mass

        start = forwards.n
        for page in (TRAJECTORIES, VOCABULARY, ATTENTION, TRAJECTORIES):
            at.switch_page(page).run()
            assert not _problems(at), page
        at.run()  # a plain re-render
        assert forwards.n == start, "a page switch or re-render ran the model"

        labels = {m.label: m.value for m in at.metric}
        assert "CRM-LR AUC (PC1, kept layers)" in labels  # the bundled calibration of the embedded model
        assert len(at.get("plotly_chart")) == 3  # LTS with band, baselines, per-position heatmap
        assert at.get("download_button")

        at.radio(key="ror.w.crm.direction").set_value("supervised").run()
        at.radio(key="ror.traj.quantity").set_value("lens").run()
        assert not _problems(at) and forwards.n == start

        at.switch_page(VOCABULARY).run()
        assert not _problems(at)
        tables = at.dataframe
        assert len(tables) == 2 and len(tables[0].value) == 31  # back-projection per row (emb + 30 layers)
        at.radio(key="ror.w.vocab.direction").set_value("run").run()  # this run's own displacement
        assert not _problems(at) and len(at.dataframe[0].value) == 31
        assert forwards.n == start

        # opening one head is a user action: exactly one more forward, cached afterwards
        at.switch_page(ATTENTION).run()
        at.number_input(key="ror.attn.layer_w").set_value(3).run()
        assert not _problems(at)
        assert forwards.n == start + 1
        assert len(at.get("plotly_chart")) == 5
        at.run()
        assert forwards.n == start + 1


@pytest.fixture
def tiny_model_folder(tmp_path, monkeypatch):
    """The tiny random Llama of conftest saved as a local model folder, and an empty cache folder."""
    from tests.conftest import make_byte_tokenizer, make_tiny_llama

    tokenizer = make_byte_tokenizer()
    model = make_tiny_llama(len(tokenizer))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    folder = tmp_path / "tiny-llama"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    return folder


@pytest.mark.slow
def test_another_model_is_calibrated_from_the_layer_trajectories_page(tiny_model_folder):
    at = open_script(APP, 180)
    at.radio(key="ror.w.model_choice").set_value("custom").run()
    at.text_input(key="ror.w.model_id").input(str(tiny_model_folder)).run()
    assert not _problems(at)
    _run_dual_path(at)
    at.switch_page(TRAJECTORIES).run()
    assert not _problems(at)
    assert any("No CRM calibration exists yet" in str(i.value) for i in at.info)
    assert not any(m.label == "Layers outside μ ± 2σ" for m in at.metric)
    at.button(key="ror.traj.compute").click().run()
    assert not _problems(at)
    assert any(m.label == "Layers outside μ ± 2σ" for m in at.metric)  # the trajectory now has its band
    assert (tiny_model_folder.parent / "cache" / "crm").is_dir()  # cached on disk for this model
    at.switch_page(VOCABULARY).run()
    assert not _problems(at) and len(at.dataframe[0].value) == 4  # emb + 3 layers


# ----------------------------------------------------------------------------------------------------------
# Fast: the same pages on the tiny random Llama (3 layers × 4 heads)


def test_views_open_with_their_title_and_point_to_the_dual_path_page_before_any_run(tiny_app):
    at = open_script(APP, 120)
    with ForwardCounter() as forwards:
        for view, title in VIEWS.items():
            at.switch_page(view).run()
            assert not _problems(at), view
            assert [t.value for t in at.title] == [title]
            assert [t.value for t in at.sidebar.text] == ["tiny-random-llama"], "the shared sidebar is drawn"
            assert any("No run yet" in str(i.value) for i in at.info), view
    assert forwards.n == 0


def test_attention_opens_on_a_tiny_run_and_opens_one_head(tiny_app):
    at = open_script(APP, 120)
    _run_dual_path(at, max_new_tokens=3)
    with ForwardCounter() as forwards:
        at.switch_page(ATTENTION).run()
        assert not _problems(at)
        assert forwards.n == 2  # one instrumented forward per path
        labels = {m.label: m.value for m in at.metric}
        assert labels["Specialized heads (retrieval path)"].endswith("of 12")  # 3 layers × 4 heads
        at.number_input(key=keys.ATTN_LAYER).set_value(2).run()
        assert not _problems(at)
        assert forwards.n == 3 and at.session_state[keys.ATTN_CELL] == ("retrieval", 2, 0)
        assert len(at.get("plotly_chart")) == 5  # two maps, their difference, context mass, the head's pattern


def test_a_run_of_another_model_is_not_analyzed(tiny_app, use_loader):
    at = open_script(APP, 120)
    _run_dual_path(at, max_new_tokens=3)
    other = handle_from_model(tiny_app.model, tiny_app.tokenizer, name="another-tiny-llama")
    use_loader(lambda *args, **kwargs: other)
    with ForwardCounter() as forwards:
        for view in VIEWS:
            at.switch_page(view).run()
            assert not _problems(at), view
            (warning,) = [w.value for w in at.main.warning]  # the sidebar may say the model is not calibrated
            assert "The last run used" in warning, view
            assert not at.metric and not at.get("plotly_chart"), view
    assert forwards.n == 0


def test_the_crm_calibration_button_has_an_estimate(tiny_app) -> None:
    at = open_script(APP, 120)
    at.switch_page("pages/1_Dual_Path.py").run()
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(3).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere.")
    at.button(key=keys.RUN).click().run()
    at.switch_page("pages/3_Layer_Trajectories.py").run()
    assert not at.exception, at.exception
    assert any(b.label == "Compute the CRM calibration" for b in at.button), "the tiny model has no basis yet"
    assert any(c.value.startswith("240 forward passes: ") and "on this machine" in c.value for c in at.caption)
