"""Evaluation metrics against scikit-learn on hand-made scores, the bootstrap CI, cross-validated fitted
detectors, upload validation, the conflict set and the extended `evaluate` JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score, roc_curve
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from core.cli import main
from core.detectors.fitted import cross_validated_scores
from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH, Detector
from core.evaluation import (
    DataError,
    answer_follows,
    detector_metrics,
    label_confirmed,
    parse_conflict_csv,
    parse_labeled_bytes,
    summarize,
)
from core.evaluation.evaluate import EvaluateOptions
from core.maths.metrics import auc_bootstrap_ci, roc_points

Y = np.array([1, 1, 1, 1, 0, 0, 0, 0, 1, 0])
S = np.array([0.9, 0.8, 0.7, 0.2, 0.6, 0.3, 0.1, 0.05, 0.65, 0.4])


def _det(name: str = "d", higher: str = MEMORIZED_HIGH) -> Detector:
    return Detector(name=name, label=name, higher_means=higher, score=lambda inp: 0.0)


def test_metrics_against_sklearn_on_hand_made_scores():
    m = detector_metrics(Y, S.tolist(), _det())
    assert m["auc"] == pytest.approx(roc_auc_score(Y, S))
    fpr, tpr, _ = roc_curve(Y, S, drop_intermediate=False)  # every operating point (core.maths.metrics)
    assert m["fpr_at_95tpr"] == pytest.approx(fpr[tpr >= 0.95].min())
    assert m["precision_at_10"] == pytest.approx(Y.mean())  # 10 rows: P@10 is the positive share
    assert m["roc"]["fpr"] == pytest.approx(fpr.tolist()) and m["roc"]["tpr"] == pytest.approx(tpr.tolist())
    # a "higher means grounded" detector is oriented by negation: same AUC on −S
    flipped = detector_metrics(Y, (-S).tolist(), _det(higher=GROUNDED_HIGH))
    assert flipped["auc"] == pytest.approx(m["auc"])
    # rows without a score are left out; one class only → no metrics, with a note
    partial = detector_metrics(Y, [None, *S[1:].tolist()], _det())
    assert partial["n"] == 9 and partial["auc"] == pytest.approx(roc_auc_score(Y[1:], S[1:]))
    assert detector_metrics(Y[:4], S[:4].tolist(), _det())["auc"] is None


def test_bootstrap_ci_resamples_like_sklearn_contains_estimate_and_narrows():
    rng = np.random.default_rng(0)
    lo, hi = auc_bootstrap_ci(Y, S, n_boot=200, seed=3)
    # the same resamples scored by sklearn give the same percentile interval
    idx = np.random.default_rng(3).integers(0, Y.size, size=(200, Y.size))
    aucs = [roc_auc_score(Y[i], S[i]) for i in idx if 0 < Y[i].sum() < Y.size]
    assert (lo, hi) == pytest.approx(tuple(np.quantile(aucs, [0.025, 0.975])))

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.array([1] * (n // 2) + [0] * (n - n // 2))
        return y, rng.normal(size=n) + 1.0 * y

    widths = []
    for n in (40, 400, 4000):
        y, s = draw(n)
        lo, hi = auc_bootstrap_ci(y, s, n_boot=500)
        assert lo <= roc_auc_score(y, s) <= hi
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]
    assert widths[1] / widths[2] == pytest.approx(np.sqrt(10), rel=0.3)  # ~1/√n
    assert auc_bootstrap_ci(Y, S, seed=5) == auc_bootstrap_ci(Y, S, seed=5)


def test_roc_points_json_safe():
    fpr, tpr, thr = roc_points(Y, S)
    assert np.isnan(thr[0]) and np.all(np.isfinite(thr[1:]))
    assert fpr[0] == 0 and tpr[-1] == 1


def test_cross_validated_scores_never_use_a_rows_own_label():
    rng = np.random.default_rng(1)
    y = np.array([0, 1] * 15)
    x = rng.normal(size=(30, 3)) + y[:, None]
    got = cross_validated_scores(x, y)
    want = np.empty(30)
    for train, test in StratifiedKFold(5, shuffle=True, random_state=42).split(x, y):
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(x[train], y[train])
        want[test] = model.predict_proba(x[test])[:, 1]
    np.testing.assert_allclose(got, want)
    # pure-noise features: a model scored on its own training rows looks good, out-of-fold scores do not
    noise = rng.normal(size=(40, 25))
    labels = np.array([0, 1] * 20)
    in_sample = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(noise, labels)
    assert roc_auc_score(labels, in_sample.predict_proba(noise)[:, 1]) > 0.9
    assert roc_auc_score(labels, cross_validated_scores(noise, labels)) < 0.7
    with pytest.raises(ValueError, match="2 rows of each"):
        cross_validated_scores(x[:3], np.array([0, 1, 0]))


def test_summarize_fills_fitted_scores_out_of_fold():
    rng = np.random.default_rng(2)
    fitted = Detector(
        name="fit",
        label="fit",
        higher_means=MEMORIZED_HIGH,
        score=lambda inp: 0.0,
        needs_fit=True,
        features=lambda inp: np.zeros(2),
    )
    records = []
    for i in range(20):
        lab = "memorized" if i % 2 else "grounded"
        records.append(
            {
                "row": i + 1,
                "label": lab,
                "scores": {"plain": float(i % 2 + rng.normal()), "fit": None},
                "features": {"fit": (rng.normal(size=2) + (i % 2)).tolist()},
            }
        )
    summary, rows = summarize(records, {"plain": _det("plain"), "fit": fitted}, n_boot=100)
    x = np.array([r["features"]["fit"] for r in records])
    y = np.array([1 if r["label"] == "memorized" else 0 for r in records])
    np.testing.assert_allclose([r["scores"]["fit"] for r in rows], cross_validated_scores(x, y))
    assert records[0]["scores"]["fit"] is None  # the caller's records are not modified
    assert summary["detectors"]["fit"]["auc"] == pytest.approx(roc_auc_score(y, [r["scores"]["fit"] for r in rows]))
    assert "cross_validated" in summary["detectors"]["fit"] and summary["robustness"] is None


def test_upload_validation_is_all_or_nothing():
    good = b"\xef\xbb\xbfquery,context,label\nq,c,memorized\nq2,c2,grounded\n"
    assert [r.label for r in parse_labeled_bytes(good, name="up.csv")] == ["memorized", "grounded"]
    with pytest.raises(DataError, match=r"up.csv is 52 bytes; the limit is 10 bytes"):
        parse_labeled_bytes(good, name="up.csv", max_bytes=10)
    with pytest.raises(DataError, match="not UTF-8"):
        parse_labeled_bytes(b"query,context,label\nq,caf\xe9,grounded\n")
    with pytest.raises(DataError, match=r"Row 2, column 'label'"):
        parse_labeled_bytes(b"query,context,label\nq,c,memorized\nq,c,perhaps\n")


def test_conflict_rows_and_follows():
    rows = parse_conflict_csv(
        "query,context,answer_context,answer_memory\nCapital of France?,The capital of France is Lyon.,Lyon,Paris\n"
    )
    assert rows[0].answer_context == "Lyon" and rows[0].answer_memory == "Paris"
    with pytest.raises(DataError, match=r"Row 1, column 'answer_memory'"):
        parse_conflict_csv("query,context,answer_context,answer_memory\nq,c,Lyon,\n")
    assert answer_follows("It is Lyon.", "Lyon", "Paris") == "context"
    assert answer_follows("paris", "Lyon", "Paris") == "memory"
    assert answer_follows("Paris, not Lyon", "Lyon", "Paris") == "both"
    assert answer_follows("I do not know", "Lyon", "Paris") == "neither"


def test_label_confirmed():
    assert label_confirmed("memorized", {"parametric_correct": "true"}) is True
    assert label_confirmed("memorized", {"parametric_correct": "false"}) is False
    assert label_confirmed("grounded", {"parametric_correct": "False"}) is True
    assert label_confirmed("grounded", {"parametric_correct": "1"}) is False
    assert label_confirmed("grounded", {}) is None


def test_cli_evaluate_adds_ci_and_every_detector(tmp_path, cli_model, facts_csv):
    data = facts_csv(12, step=7, memorized=lambda i: i % 2 == 1)
    out = tmp_path / "r.json"
    names = "repcs,repcs_mean,max_token_kl,ppl,zlib,min_k_20,min_kpp_10,crm_l2_lr"
    assert main(["evaluate", str(data), "--out", str(out), "--max-new-tokens", "3", "--detectors", names]) == 0
    report = json.loads(out.read_text())
    assert list(report["detectors"]) == names.split(",")
    for name, m in report["detectors"].items():
        assert {"auc", "auc_ci", "fpr_at_95tpr", "precision_at_10"} <= set(m), name
        assert m["n"] == 12 and m["auc_ci"][0] <= m["auc"] <= m["auc_ci"][1], name
    assert all(0.0 <= r["scores"]["crm_l2_lr"] <= 1.0 for r in report["rows"])
    assert all(len(r["features"]["crm_l2_lr"]) == 7 for r in report["rows"])  # mean max var early late has_late trend
    # RePCS Table IV rides along: σ = 0 reproduces the repcs AUC
    assert [r["sigma"] for r in report["robustness"]] == [0.0, 0.02, 0.05, 0.1]
    assert report["robustness"][0]["auc"] == pytest.approx(report["detectors"]["repcs"]["auc"])


def test_cli_evaluate_sample_cheap_and_bad_sigmas(tmp_path, cli_model, facts_csv, capsys):
    from core.detectors.registry import available

    data = facts_csv(12, step=7, memorized=lambda i: i % 3 != 0)
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "evaluate",
                str(data),
                "--out",
                str(out),
                "--max-new-tokens",
                "2",
                "--sample",
                "6",
                "--detectors",
                "cheap",
                "--sigmas",
                "",
                "--bootstrap",
                "50",
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["n"] == 6 and sum(r["label"] == "memorized" for r in report["rows"]) == 4
    cheap = [n for n, d in available().items() if d.cost in ("free", "forward")]
    assert list(report["detectors"]) == cheap and report["robustness"] is None
    assert "AUC=" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    assert main(["evaluate", str(data), "--out", str(bad), "--sigmas", "0,big"]) != 0
    assert "--sigmas" in capsys.readouterr().err and not bad.exists()


def test_stratified_sample_keeps_proportions():
    from core.evaluation import LabeledRow, stratified_sample

    rows = [LabeledRow(i + 1, f"q{i}", "c", "memorized" if i < 30 else "grounded") for i in range(100)]
    sample = stratified_sample(rows, 10, seed=1)
    assert len(sample) == 10 and [r.row for r in sample] == sorted(r.row for r in sample)
    assert sum(r.label == "memorized" for r in sample) == 3
    assert stratified_sample(rows, 10, seed=1) == sample and stratified_sample(rows, 500) == rows
    tiny = stratified_sample(rows, 1)
    assert {r.label for r in tiny} == {"memorized", "grounded"}  # never drops a label


def test_conflict_records_say_which_source_each_answer_follows(tiny_handle):
    from core.engine import DualPathSettings
    from core.evaluation import resolve_detectors, score_records

    rows = parse_conflict_csv(
        "query,context,answer_context,answer_memory\n"
        "Capital of France?,The capital of France is Lyon.,Lyon,Paris\n"
        "Boiling point?,Water boils at 40 degrees.,40,100\n"
    )
    records = score_records(
        tiny_handle,
        rows,
        DualPathSettings(max_new_tokens=3, score_window=3),
        resolve_detectors(["repcs", "ppl"]),
        free_parametric=True,
    )
    for row, rec in zip(rows, records):
        assert rec["follows"] == answer_follows(rec["rag_answer"], row.answer_context, row.answer_memory)
        assert rec["parametric_follows"] == answer_follows(
            rec["parametric_answer"], row.answer_context, row.answer_memory
        )
        assert rec["answer_memory"] == row.answer_memory and "label" not in rec
        assert rec["scores"]["repcs"] == rec["repcs_score"] and rec["scores"]["ppl"] > 0


@pytest.mark.slow
def test_crm_lr_cv_on_the_embedded_model_uses_the_kept_layers(embedded_handle):
    from pathlib import Path

    from core.engine import DualPathSettings
    from core.evaluation import evaluate_rows, read_labeled_csv
    from core.methods.crm import load_basis

    rows = read_labeled_csv(Path(__file__).resolve().parents[3] / "assets" / "probes" / "probes.csv")[:8]
    report = evaluate_rows(
        embedded_handle,
        rows,
        DualPathSettings(max_new_tokens=4, score_window=4),
        detectors=["crm_lr_cv"],
        noise_sigmas=(),
        n_boot=50,
    )
    kept = load_basis(embedded_handle, "auto").kept_layers
    assert all(len(r["features"]["crm_lr_cv"]) == len(kept) and "errors" not in r for r in report["rows"])
    assert all(0.0 <= r["scores"]["crm_lr_cv"] <= 1.0 for r in report["rows"])
    assert report["detectors"]["crm_lr_cv"]["n"] == 8


def test_evaluate_options_take_keywords_over_the_given_options():
    given = EvaluateOptions(detectors=["repcs"], n_boot=50)
    merged = EvaluateOptions.of(given, {"n_boot": 20, "noise_sigmas": ()})
    assert (merged.detectors, merged.n_boot, tuple(merged.noise_sigmas)) == (["repcs"], 20, ())
    assert EvaluateOptions.of(None, {}) == EvaluateOptions()
    with pytest.raises(TypeError):
        EvaluateOptions.of(None, {"bootstrap": 20})
