"""Cosmetic fixes of issue 14 that can still mislead: no "�" where the token limit cuts a multi-byte character,
no blank first line in the Self-Critique instruction (the prompt stays the authors'), the RADAR ensemble bar."""

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
