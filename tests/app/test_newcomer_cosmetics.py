"""Cosmetic fixes of issue 14 that can still mislead: no "�" where the token limit cuts a multi-byte character,
no blank first line in the Self-Critique instruction (the prompt stays the authors'), the RADAR ensemble bar,
tokens that fit the Ablations grid's cells."""

from __future__ import annotations

import numpy as np

from core.engine.prepare import Prompt
from core.engine.scoring import Answer, PathStats, _path_output
from core.methods.selfcritique import DEFAULT_INSTRUCTION, critique_query


def test_a_cut_multibyte_character_is_not_shown_as_a_replacement_character(tiny_handle) -> None:
    ids = tiny_handle.tokenizer.encode("Café", add_special_tokens=False)[:-1]  # the limit cut "é" in half
    assert tiny_handle.tokenizer.decode(ids).endswith("\ufffd"), "the byte tokenizer shows the cut"
    n = len(ids)
    stats = PathStats(np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros((n, 1), np.int64), np.ones((n, 1)))
    out = _path_output(tiny_handle, Prompt("p", [1]), Answer(list(ids), "length"), stats)
    assert out.answer == "Caf" and out.token_ids == list(ids)


def test_the_critique_instruction_has_no_blank_first_line_and_the_prompt_is_unchanged() -> None:
    assert not DEFAULT_INSTRUCTION.startswith("\n")
    authors = "\n" + DEFAULT_INSTRUCTION  # the released code's SELF_CRITIQUE_INSTRUCTION begins with a newline
    assert critique_query("Q?", "r1") == "Q?" + authors.replace("{response}", "r1")
    assert critique_query("Q?", "r1", authors) == critique_query("Q?", "r1"), "an old stored instruction still works"


def test_radar_ensemble_bar_label_is_readable() -> None:
    from components.radar_figures import probability_figure
    from core.methods.radar.classifier import RadarPrediction

    pred = RadarPrediction(0.95, "recall", 0.95, "recall", {}, {}, 0.5, 0.5)
    fig = probability_figure(pred)
    assert fig.layout.yaxis.showticklabels is False, "no clipped 'ensemble' tick"
    texts = [t.text[0] for t in fig.data]
    assert texts == ["recall 0.95", "0.05"], "a sliver gets its number only"
    assert all(t.textfont.color == "white" and t.insidetextanchor == "middle" for t in fig.data)


def test_a_long_token_is_cut_to_fit_its_ablation_grid_cell_and_shown_whole_in_the_hover() -> None:
    from components.ablation_figures import CELL_CHARS, token_diff_figure

    tokens = [" Constantinople", " <b>", " a"]
    fig = token_diff_figure(tokens, [True, False, False], [" Paris", " <b>", " a"])
    (heat,) = fig.data
    cells = [str(t) for row in heat.text for t in row if t]
    assert cells[0] == "␣Const…" and len(cells[0]) == CELL_CHARS, "cut before the cell's edge, with an ellipsis"
    assert cells[1] == "␣&lt;b&gt;", "escaped after the cut: an entity is never split"
    assert all(len(c.replace("&lt;", "<").replace("&gt;", ">")) <= CELL_CHARS for c in cells)
    assert "␣Constantinople" in heat.customdata[0][0], "the whole token in the hover"


def test_a_wide_table_keeps_its_label_column_pinned_and_its_long_text_narrow() -> None:
    import pandas as pd

    from components.widgets import fitted_columns

    frame = pd.DataFrame({"layer": ["emb"], "KL (nats)": [0.5], "retrieval top-k": ["␣Paris 0.93  ␣the 0.02"]})
    config = fitted_columns(
        frame, pinned=("layer",), text=("retrieval top-k", "absent"), numbers={"KL (nats)": "%.3f", "gone": "%d"}
    )
    assert set(config) == {"layer", "KL (nats)", "retrieval top-k"}, "columns the frame lacks are skipped"
    assert config["layer"]["pinned"] is True
    assert config["retrieval top-k"]["width"] == "medium"
    assert config["KL (nats)"]["type_config"]["format"] == "%.3f"


def test_the_vocabulary_lens_tables_show_the_numbers_first_with_the_layer_pinned(tiny_app) -> None:
    import json

    from tests.app.conftest import APP, ok, open_script

    at = open_script(APP, 120)
    ok(at.switch_page("pages/1_Dual_Path.py").run())
    at.number_input(key="ror.w.max_new_tokens").set_value(4)
    at.text_area(key="ror.w.query").input("What is the capital of Veltria?")
    at.text_area(key="ror.w.context").input("The capital of Veltria is Marrowgate.")
    ok(at.run())
    ok(at.button(key="ror.run").click().run())
    ok(at.switch_page("pages/4_Vocabulary_Lens.py").run())
    assert len(at.dataframe) == 2, "the back-projection and the logit lens"
    lens = at.dataframe[1]
    assert list(lens.value.columns[:5]) == [
        "layer",
        "top-1 differs",
        "KL (nats)",
        "p(answer) retrieval",
        "p(answer) parametric",
    ], "the numbers come before the long top-k text"
    for table in at.dataframe:
        config = json.loads(table.proto.columns)
        assert config["layer"]["pinned"] is True
        text = [name for name, c in config.items() if c.get("type_config", {}).get("type") == "text"]
        assert len(text) == 2 and all(config[name]["width"] == "large" for name in text)
