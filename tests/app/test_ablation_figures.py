"""figures.ablation: tokens fit the Ablations grid's cells (issue 14); the curves' series and hovers."""

from __future__ import annotations

import numpy as np


def test_a_long_token_is_cut_to_fit_its_ablation_grid_cell_and_shown_whole_in_the_hover() -> None:
    from figures.ablation import CELL_CHARS, token_diff_figure

    tokens = [" Constantinople", " <b>", " a"]
    fig = token_diff_figure(tokens, [True, False, False], [" Paris", " <b>", " a"])
    (heat,) = fig.data
    cells = [str(t) for row in heat.text for t in row if t]
    assert cells[0] == "␣Const…" and len(cells[0]) == CELL_CHARS, "cut before the cell's edge, with an ellipsis"
    assert cells[1] == "␣&lt;b&gt;", "escaped after the cut: an entity is never split"
    assert all(len(c.replace("&lt;", "<").replace("&gt;", ">")) <= CELL_CHARS for c in cells)
    assert "␣Constantinople" in heat.customdata[0][0], "the whole token in the hover"


def _styles(fig) -> list[tuple]:
    """(name, mode, line color, dash, width) of every trace."""
    return [(t.name, t.mode, t.line.color, t.line.dash, t.line.width) for t in fig.data]


def test_the_kl_and_trajectory_curves_keep_their_series_styles_and_hovers() -> None:
    from figures.ablation import CLEAN_COLOR, PERTURBED_COLOR, kl_compare_figure, trajectory_figure

    fig = kl_compare_figure([" a", "<b>"], [0.1, 0.2], [" a"], [0.3], score_window=1)
    assert _styles(fig) == [
        ("clean", "lines+markers", CLEAN_COLOR, "solid", 2),
        ("perturbed", "lines+markers", PERTURBED_COLOR, "dot", 2),
    ]
    assert list(fig.data[0].customdata) == ["␣a", "&lt;b&gt;"] and fig.data[0].marker.size == 5
    assert fig.data[1].hovertemplate.endswith("<extra>perturbed</extra>")
    assert fig.layout.shapes[0].x0 == 0.5, "the window's end"
    fig = trajectory_figure(np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.5, 2.5]), flagged=[1])
    assert _styles(fig)[:2] == [
        ("clean", "lines+markers", CLEAN_COLOR, "solid", 2),
        ("perturbed", "lines+markers", PERTURBED_COLOR, "dot", 2),
    ]
    assert list(fig.data[0].customdata) == ["emb", "0", "1"] and list(fig.data[2].x) == [2]


def test_the_dose_response_means_carry_their_error_bars_and_one_legend_entry() -> None:
    from core.methods.ablation import NoiseGrid
    from figures.ablation import dose_response_figure
    from figures.base import KL_COLOR, RETRIEVAL_COLOR

    z = np.array([[0.5, 0.7], [0.9, 1.3]])
    grid = NoiseGrid(
        kind="dose_response",
        layers=[1],
        eps=[0.1, 0.5],
        seeds=[0, 1],
        conditions=[0.1, 0.5],
        z=z,
        first_token_logprob=-z,
        first_token_logprob_para=-z,
        answer_changed=z > 1,
        n_tokens=np.ones((2, 2), dtype=int),
        answers=[["a", "a"], ["a", "b"]],
        clean_z=0.4,
        clean_first_token_logprob=-0.1,
        clean_first_token_logprob_para=-0.2,
        clean_answer="a",
        clean_first_token="a",
        clean_n_tokens=1,
        settings={},
        model="m",
        query="q",
        context="c",
    )
    fig = dose_response_figure(grid)
    means = [t for t in fig.data if t.mode == "lines+markers"]
    assert [(t.name, t.line.color, t.line.width, t.showlegend) for t in means] == [
        ("mean over seeds", KL_COLOR, 2, True),
        ("log p mean", RETRIEVAL_COLOR, 2, False),
    ]
    assert np.allclose(means[0].y, [0.6, 1.1]) and np.allclose(means[0].error_y.array, z.std(axis=1, ddof=1))
    assert means[0].error_y.visible and means[0].hovertemplate == "ε = %{x}<br>mean %{y:.4f}<extra></extra>"
