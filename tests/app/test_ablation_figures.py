"""components.ablation_figures (issue 14): tokens fit the Ablations grid's cells."""

from __future__ import annotations


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
