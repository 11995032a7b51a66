"""Figure builders, text helpers and widget keys (no Streamlit runtime; the tiny random model for a real result)."""

from __future__ import annotations

import sys
import tempfile

import numpy as np
import pytest

from components import keys
from components.text import escape_markdown, plain_message, redact_paths
from core.engine import DualPathSettings, run_dual_path
from core.io import REPO_ROOT, cache_dir
from figures import base as figures

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
    retrieval, parametric = figures.topk_frames(r, t)
    assert list(retrieval.columns) == ["rank", "token", "probability", "chosen"]
    assert len(retrieval) == len(parametric) == 5
    assert np.all(np.diff(retrieval["probability"]) <= 0), "sorted by probability"
    np.testing.assert_allclose(retrieval["probability"], r.retrieval.topk_probs[t], rtol=1e-6)
    assert retrieval["chosen"].any(), "greedy: the answer token is among the retrieval path's top candidates"
    both = figures.topk_side_by_side(r, t)
    assert list(both.columns) == ["rank", "retrieval token", "retrieval p", "parametric token", "parametric p"]
    with pytest.raises(ValueError):
        figures.topk_frames(r, r.n_tokens)
    fig = figures.kl_entropy_figure_for(r)
    assert sum(len(tr.x) for tr in fig.data if tr.type == "bar") == r.n_tokens


def test_escape_markdown() -> None:
    assert escape_markdown("**bold** [x](y) $a$ :red[z] <i>") == (r"\*\*bold\*\* \[x\]\(y\) \$a\$ \:red\[z\] \<i\>")


def test_redact_paths_hides_the_servers_own_folders() -> None:
    text = (
        f"missing from {sys.prefix}/lib/x; see {REPO_ROOT}/core/io.py and {cache_dir()}/models, "
        f"tmp {tempfile.gettempdir()}/a, yours /models/my-llm"
    )
    redacted = redact_paths(text)
    for folder in (sys.prefix, str(REPO_ROOT), str(cache_dir()), tempfile.gettempdir()):
        assert folder not in redacted
    assert "[python environment]/lib/x" in redacted and "[app]/core/io.py" in redacted
    assert "[cache]/models" in redacted and "[temp]/a" in redacted
    assert redacted.endswith("yours /models/my-llm"), "a path of the user's own stays"
    # whole names only: a sibling of the app folder is not the app (it may still sit in another server folder,
    # e.g. when the checkout itself lives under the temporary folder)
    assert "[app]" not in redact_paths(f"{REPO_ROOT}x/y {REPO_ROOT}.git"), "whole names only"
    assert redact_paths(f"in {REPO_ROOT}.") == "in [app]."
    assert plain_message(f"**{REPO_ROOT}**") == r"\*\*\[app\]\*\*"


def _constants() -> dict[str, str]:
    return {name: value for name, value in vars(keys).items() if name.isupper() and isinstance(value, str)}


def test_widget_keys_are_distinct_and_follow_the_conventions() -> None:
    constants = {n: v for n, v in _constants().items() if not n.endswith("PREFIX") and n != "PREFIX"}
    values = list(constants.values())
    assert len(set(values)) == len(values), "two constants share a key"
    for name, value in constants.items():
        assert value.strip() == value and " " not in value, name
        if value.startswith(keys.PREFIX):
            assert not value.startswith((keys.STORE_PREFIX, keys.WIDGET_PREFIX)), f"{name}: a store/widget key"
    persistent = [v for v in values if not v.startswith(keys.PREFIX)]
    assert keys.QUERY in persistent and keys.ABLATE_MODE in persistent


def test_key_builders() -> None:
    assert keys.widget_key(keys.QUERY) == "ror.w.query" and keys.store_key(keys.QUERY) == "ror.s.query"
    assert keys.scoped(keys.KL_CHART, "abc") == "ror.kl_chart.abc"
    assert keys.scoped(keys.ATTN_MAP, "retrieval", 3) == "ror.attn.map.retrieval.3"
    with pytest.raises(ValueError, match="ror"):
        keys.scoped("kl_chart", "abc")
    with pytest.raises(ValueError, match="prefix"):
        keys.widget_key("ror.w.query")
    with pytest.raises(ValueError):
        keys.store_key("")
