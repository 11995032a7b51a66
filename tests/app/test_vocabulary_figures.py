"""figures.vocabulary: the logit lens's per-layer probability of the answer token on each path."""

from __future__ import annotations

import numpy as np

from figures.base import PARAMETRIC_COLOR, RETRIEVAL_COLOR


def test_the_lens_figure_gives_each_path_its_probability_per_layer() -> None:
    from figures.vocabulary import lens_figure

    fig = lens_figure(np.log([0.5, 0.25]), np.log([0.1, 0.2]), np.array([0.3, 0.1]), answer_token=" <P>")
    top = [t for t in fig.data if t.name in ("retrieval path", "parametric path")]
    assert [(t.name, t.mode, t.line.color) for t in top] == [
        ("retrieval path", "lines+markers", RETRIEVAL_COLOR),
        ("parametric path", "lines+markers", PARAMETRIC_COLOR),
    ]
    assert np.allclose(top[0].y, [0.5, 0.25]) and list(top[0].customdata) == ["emb", "0"]
    assert top[1].hovertemplate.endswith("<extra>parametric path</extra>")
