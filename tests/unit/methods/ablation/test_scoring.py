"""One lean scoring run against the engine, and the sweep settings (tiny random Llama)."""

from __future__ import annotations

import numpy as np
import pytest

from core.engine import DualPathSettings, prepare_prompts, run_dual_path
from core.methods import ablation
from core.methods.ablation import noise_injection

Q, C = "Where is the tower?", "The tower stands in Quillmere."


def _settings(n: int = 6) -> DualPathSettings:
    return DualPathSettings(max_new_tokens=n, score_window=n, top_k=5)


def test_sweep_settings_tie_the_window_to_the_answer_length():
    s = ablation.sweep_settings(DualPathSettings(max_new_tokens=64, score_window=64, template="A"), 16)
    assert (s.max_new_tokens, s.score_window, s.template, s.force_length) == (16, 16, "A", False)
    with pytest.raises(ValueError):
        ablation.sweep_settings(DualPathSettings(), 0)


def test_score_run_matches_the_engine(tiny_handle):
    s = _settings()
    prep = prepare_prompts(tiny_handle, Q, C, s)
    rec = ablation.score_run(tiny_handle, prep, s)
    res = run_dual_path(tiny_handle, Q, C, s, free_parametric=False)
    assert rec.answer_ids == res.answer_token_ids
    np.testing.assert_array_equal(rec.token_kl, res.token_kl)
    assert rec.z == res.repcs_score
    assert rec.first_token_logprob == pytest.approx(float(res.retrieval.logprob[0]), abs=1e-6)
    assert rec.first_token_logprob_para == pytest.approx(float(res.parametric.logprob[0]), abs=1e-6)
    with noise_injection(tiny_handle, [1], 0.7, 2):
        noisy = ablation.score_run(tiny_handle, prep, s, clean_first_token=rec.answer_ids[0])
        lp = ablation.first_token_logprob(tiny_handle, prep.retrieval.ids, rec.answer_ids[0])
    assert noisy.first_token_logprob == pytest.approx(lp, abs=1e-5)
    assert noisy.first_token_logprob != pytest.approx(rec.first_token_logprob, abs=1e-6)
