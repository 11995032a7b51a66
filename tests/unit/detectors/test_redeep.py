"""ReDeEP's three detectors: registry entries, scores from one shared forward, the stored choice of the embedded
model, the label-free default of another model and the user's override."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from core.detectors import DetectorInput, available, get
from core.detectors.redeep import DETAILS_KEY, SETTINGS
from core.detectors.registry import CONTEXT_RELIANCE, GROUNDED_HIGH, MEMORIZED_HIGH, PARAMETRIC_KNOWLEDGE
from core.engine import DualPathSettings, run_dual_path
from core.methods.redeep import OVERRIDE_ENV, choice_for, is_fitted, load_choice_for, load_table_for, row_means
from core.methods.redeep.choice import OV

pytestmark = pytest.mark.usefixtures("one_thread")
SETTINGS_SHORT = DualPathSettings(max_new_tokens=6, score_window=6)


def test_the_registry_states_groups_directions_and_cost():
    found = available()
    expected = {
        "redeep": (MEMORIZED_HIGH, CONTEXT_RELIANCE),
        "redeep_ecs": (GROUNDED_HIGH, CONTEXT_RELIANCE),
        "redeep_pks": (MEMORIZED_HIGH, PARAMETRIC_KNOWLEDGE),
    }
    for name, (direction, group) in expected.items():
        d = found[name]
        assert (d.higher_means, d.group, d.cost) == (direction, group, "forward"), name
        assert "2410.11414" in d.source


@pytest.fixture(scope="module")
def tiny_inp(tiny_handle):
    result = run_dual_path(
        tiny_handle, "Who wrote the note?", "The note was written by Ada on Tuesday.", SETTINGS_SHORT
    )
    return tiny_handle, result


def test_the_label_free_default_and_one_forward_shared_by_the_three(tiny_inp, tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    handle, result = tiny_inp
    assert load_choice_for(handle, result.template) is None
    choice = choice_for(handle, result.template)
    assert not is_fitted(choice) and choice.head_method == OV and (choice.alpha, choice.beta) == (1.0, 1.0)
    inp = DetectorInput(handle, result, SETTINGS_SHORT)
    score = get("redeep").score(inp)
    view = inp.cache[DETAILS_KEY]
    ecs, pks = get("redeep_ecs").score(inp), get("redeep_pks").score(inp)
    assert inp.cache[DETAILS_KEY] is view  # no second forward
    mean_ecs, mean_pks = row_means(view.trace)
    heads = np.array(choice.heads)
    assert ecs == pytest.approx(mean_ecs[heads[:, 0], heads[:, 1]].mean(), abs=1e-6)
    assert pks == pytest.approx(mean_pks[choice.layers].mean(), abs=1e-7)
    expected = mean_pks[choice.layers].sum() - mean_ecs[heads[:, 0], heads[:, 1]].sum()
    assert score == pytest.approx(expected, abs=1e-5)


def test_a_users_choice_wins_and_another_models_file_is_refused(tiny_inp, tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    handle, result = tiny_inp
    mine = replace(choice_for(handle, result.template), heads=[[0, 1]], layers=[2])
    inp = DetectorInput(handle, result, SETTINGS_SHORT, cache={SETTINGS: mine})
    assert get("redeep_pks").score(inp) == pytest.approx(float(inp.cache[DETAILS_KEY].trace.pks[:, 2].mean()), abs=1e-7)
    path = replace(mine, model="another model").save(tmp_path / "other.json")
    monkeypatch.setenv(OVERRIDE_ENV, str(path))
    with pytest.raises(ValueError, match="made for 'another model'"):
        get("redeep").score(DetectorInput(handle, result, SETTINGS_SHORT))
    mine.save(tmp_path / "mine.json")
    monkeypatch.setenv(OVERRIDE_ENV, str(tmp_path / "mine.json"))
    assert load_choice_for(handle, result.template).heads == [[0, 1]]


def test_the_embedded_model_has_a_fitted_choice_from_the_calibration_sets(embedded_handle):
    choice = load_choice_for(embedded_handle, "auto")
    assert choice is not None and is_fitted(choice)
    assert [t["path"] for t in choice.trained_on] == [
        "assets/calibration/clean.csv",
        "assets/calibration/memorized.csv",
    ]
    assert (choice.n_read, choice.n_recalled) == (87, 59)
    assert len(choice.heads) == 10 and len(choice.layers) == 4
    assert np.asarray(choice.ov_scores).shape == (30, 9)
    table = load_table_for(embedded_handle, "auto")
    assert table is not None and table.ecs.shape == (146, 30, 9) and int(table.labels.sum()) == 59


def test_the_detectors_on_the_embedded_model(embedded_handle):
    settings = DualPathSettings(max_new_tokens=8, score_window=8)
    result = run_dual_path(embedded_handle, "Who wrote Hamlet?", "Hamlet was written by Christopher Marlowe.", settings)
    inp = DetectorInput(embedded_handle, result, settings)
    values = {name: get(name).score(inp) for name in ("redeep", "redeep_ecs", "redeep_pks")}
    assert all(np.isfinite(v) for v in values.values())
    view = inp.cache[DETAILS_KEY]
    c = view.choice
    assert values["redeep"] == pytest.approx(
        c.alpha * values["redeep_pks"] * len(c.layers) - c.beta * values["redeep_ecs"] * len(c.heads),
        rel=1e-4,
        abs=1e-5,
    )
    assert -1.0 <= values["redeep_ecs"] <= 1.0 and 0.0 <= values["redeep_pks"] <= np.log(2)
    assert view.trace.ecs.shape == (result.n_scored, 30, 9)


def test_the_agreement_threshold_flags_about_alpha_of_the_read_calibration_rows(embedded_handle, tiny_inp):
    from core.detectors.agreement import detector_threshold
    from core.detectors.redeep import table_ecs, table_pks, table_score

    handle, result = tiny_inp
    found = detector_threshold(get("redeep"), DetectorInput(handle, result, SETTINGS_SHORT))
    assert found.value is None  # the label-free default has no calibration rows
    settings = DualPathSettings(max_new_tokens=4, score_window=4)
    res = run_dual_path(embedded_handle, "Who wrote Hamlet?", "Hamlet was written by Christopher Marlowe.", settings)
    inp = DetectorInput(embedded_handle, res, settings)
    choice, table = load_choice_for(embedded_handle, "auto"), load_table_for(embedded_handle, "auto")
    clean = table.labels == 0
    for name, scores_of in (("redeep", table_score), ("redeep_ecs", table_ecs), ("redeep_pks", table_pks)):
        t = detector_threshold(get(name), inp)
        assert t.value is not None and "read calibration rows" in t.source, name
        scores = scores_of(choice, table.ecs[clean], table.pks[clean])
        flagged = np.mean(scores < t.value) if get(name).higher_means == GROUNDED_HIGH else np.mean(scores > t.value)
        assert flagged <= 0.05 + 1 / clean.sum(), name  # the quantile interpolates between two rows
