"""Figure builders and text helpers (no Streamlit runtime; the tiny random model for a real result)."""

from __future__ import annotations

import numpy as np
import pytest

from components import figures
from components.text import escape_markdown
from core.engine.dual_path import DualPathSettings, run_dual_path

SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def tiny_result(tiny_handle):
    settings = DualPathSettings(max_new_tokens=6, score_window=4, top_k=5, force_length=True)
    return run_dual_path(tiny_handle, "What is <b>this</b>?", "A & B < C", settings)


def test_escape_label_and_display_token() -> None:
    assert figures.escape_label(SCRIPT) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert figures.escape_label("a & b") == "a &amp; b"
    assert figures.display_token(" Paris\n") == "␣Paris↵"
    assert figures.display_token("") == "∅"
    assert figures.token_label(" <b>") == "␣&lt;b&gt;"


def test_kl_figure_escapes_tokens_and_marks_the_window() -> None:
    tokens = [SCRIPT, " &", "x", "y"]
    kl = np.array([0.5, 2.0, 1.0, 0.1], dtype=np.float32)
    fig = figures.kl_entropy_figure(tokens, kl, np.ones(4), np.zeros(4), score_window=2)
    ticktext = fig.layout.xaxis2.ticktext
    assert ticktext[0] == "&lt;script&gt;alert(1)&lt;/script&gt;" and ticktext[1] == "␣&amp;"
    assert all("<" not in t for t in ticktext)
    bars = [t for t in fig.data if t.type == "bar"]
    lines = [t for t in fig.data if t.type == "scatter"]
    assert [list(b.x) for b in bars] == [[0, 1], [2, 3]], "window bars, then the bars beyond T"
    assert len(lines) == 2 and {len(t.y) for t in lines} == {4}
    for trace in fig.data:
        for row in np.asarray(trace.customdata, dtype=object).reshape(len(trace.x), -1):
            assert "<" not in str(row[0])
    assert any(a.text == "T = 2" for a in fig.layout.annotations)


def test_kl_figure_rejects_mismatched_lengths_and_handles_empty() -> None:
    with pytest.raises(ValueError, match="tokens"):
        figures.kl_entropy_figure(["a"], np.ones(2), np.ones(2), np.ones(2))
    empty = figures.kl_entropy_figure([], np.zeros(0), np.zeros(0), np.zeros(0))
    assert not empty.data


def test_topk_frames_follow_the_result(tiny_result) -> None:
    r = tiny_result
    t = figures.default_position(r.token_kl)
    assert r.token_kl[t] == r.token_kl.max()
    rag, para = figures.topk_frames(r, t)
    assert list(rag.columns) == ["rank", "token", "probability", "chosen"]
    assert len(rag) == len(para) == 5
    assert np.all(np.diff(rag["probability"]) <= 0), "sorted by probability"
    np.testing.assert_allclose(rag["probability"], r.retrieval.topk_probs[t], rtol=1e-6)
    assert rag["chosen"].any(), "greedy: the answer token is among the retrieval path's top candidates"
    both = figures.topk_side_by_side(r, t)
    assert list(both.columns) == ["rank", "retrieval token", "retrieval p", "parametric token", "parametric p"]
    with pytest.raises(ValueError):
        figures.topk_frames(r, r.n_tokens)
    fig = figures.kl_entropy_figure_for(r)
    assert sum(len(tr.x) for tr in fig.data if tr.type == "bar") == r.n_tokens


def test_escape_markdown() -> None:
    assert escape_markdown("**bold** [x](y) $a$ :red[z] <i>") == (
        r"\*\*bold\*\* \[x\]\(y\) \$a\$ \:red\[z\] \<i\>"
    )
