"""Choosing copying heads and knowledge layers, fitting α, β, storing and overriding the choice."""

from __future__ import annotations

import numpy as np
import pytest

from core.methods.redeep import CalibrationTable, ReDeEPChoice, fit_choice, parse_heads, parse_layers, refit
from core.methods.redeep.choice import OV, USER, rank_heads, rank_layers

L, H = 4, 3


def _table(n=60, seed=0) -> CalibrationTable:
    rng = np.random.default_rng(seed)
    labels = np.array([0, 1] * (n // 2))
    ecs = rng.normal(0.5, 0.05, size=(n, L, H))
    ecs[:, 2, 1] -= 0.1 * labels  # a copying head: lower ECS when recalled
    pks = rng.normal(0.05, 0.01, size=(n, L))
    pks[:, 3] += 0.03 * labels  # a knowledge layer: higher PKS when recalled
    return CalibrationTable(ecs, pks, labels)


def _fit(table, **kw) -> ReDeEPChoice:
    return fit_choice(table, model="m", model_slug="m", template="chat", k_percent=10, n_boot=50, **kw)


def test_pearson_finds_the_planted_head_and_layer_and_the_weights_have_the_papers_signs():
    choice = _fit(_table(), n_heads=1, n_layers=1)
    assert choice.heads == [[2, 1]] and choice.layers == [3]
    assert choice.alpha > 0 and choice.beta > 0
    assert choice.auc_oof > 0.9
    assert np.asarray(choice.ecs_corr).shape == (L, H) and len(choice.pks_corr) == L
    table = _table()
    scores = np.array([choice.score(e, p) for e, p in zip(table.ecs, table.pks)])
    expected = choice.alpha * table.pks[:, 3] - choice.beta * table.ecs[:, 2, 1]
    np.testing.assert_allclose(scores, expected)


def test_the_ov_method_takes_the_highest_ov_scores_and_needs_them():
    ov = np.zeros((L, H))
    ov[0, 2], ov[1, 0] = 0.9, 0.8
    choice = _fit(_table(), n_heads=2, n_layers=1, head_method=OV, ov=ov)
    assert choice.heads == [[0, 2], [1, 0]] and choice.head_method == OV
    with pytest.raises(ValueError, match="no OV"):
        _fit(_table(), head_method=OV, ov=None, ov_refusal=None)


def test_json_round_trip_and_a_users_heads_refit(tmp_path):
    table = _table()
    choice = _fit(table, n_heads=2, n_layers=2)
    path = choice.save(tmp_path / "c.json")
    again = ReDeEPChoice.load(path)
    assert again == choice
    mine = refit(choice, table, [[0, 0]], None)
    assert mine.heads == [[0, 0]] and mine.layers == choice.layers
    assert (mine.head_method, mine.layer_method) == (USER, choice.layer_method)
    assert mine.alpha != choice.alpha or mine.beta != choice.beta
    table_path = table.save(tmp_path / "t.npz")
    loaded = CalibrationTable.load(table_path)
    np.testing.assert_allclose(loaded.ecs, table.ecs, atol=1e-6)


def test_bad_choices_and_files_are_refused(tmp_path):
    choice = _fit(_table(), n_heads=1, n_layers=1)
    data = choice.to_dict()
    with pytest.raises(ValueError, match="out of range"):
        ReDeEPChoice.from_dict({**data, "heads": [[L, 0]]})
    with pytest.raises(ValueError, match="version"):
        ReDeEPChoice.from_dict({**data, "version": 99})
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot read"):
        ReDeEPChoice.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="each label"):
        _fit(CalibrationTable(np.zeros((6, L, H)), np.zeros((6, L)), np.array([0, 0, 0, 0, 1, 1])))


def test_parsing_and_ranking():
    assert parse_heads("12.3, L14.H0") == [[12, 3], [14, 0]]
    assert parse_layers("20, L21") == [20, 21]
    with pytest.raises(ValueError, match=r"layer\.head"):
        parse_heads("12")
    with pytest.raises(ValueError, match="comma-separated"):
        parse_layers("a")
    assert rank_heads(np.array([[0.3, -0.2], [-0.5, 0.1]]), 2) == [[1, 0], [0, 1]]
    assert rank_layers(np.array([0.1, 0.4, 0.2]), 2) == [1, 2]
