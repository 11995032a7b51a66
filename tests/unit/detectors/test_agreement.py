"""core.detectors.agreement (every verdict for one example) and core.engine.estimate (time estimates).

The tiny random Llama gives a real result; thresholds and verdicts are checked against hand-written cases.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from core.detectors import agreement, thresholds
from core.detectors.agreement import (
    DetectorVerdict,
    alpha_threshold,
    assess,
    cheap_detectors,
    costly_detectors,
    summary_line,
    verdict_for,
)
from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH, REGISTRY, Detector, register
from core.engine import DualPathSettings, calibration_record, run_dual_path
from core.engine.estimate import CostMeter, estimate_seconds, format_seconds
from core.engine.verdict import INCONCLUSIVE, READ, RECALLED, UNCALIBRATED, VERDICTS


@pytest.fixture(scope="module")
def tiny_result(tiny_handle):
    settings = DualPathSettings(max_new_tokens=5, score_window=5, top_k=4)
    return run_dual_path(tiny_handle, "Where is the tower?", "The tower stands in Quillmere.", settings)


def _v(name: str, verdict: str) -> DetectorVerdict:
    return DetectorVerdict(name, name, GROUNDED_HIGH, 1.0, 1.0, "s", verdict, "free")


@pytest.mark.parametrize(
    ("score", "threshold", "higher", "expected"),
    [
        (1.0, 2.0, GROUNDED_HIGH, RECALLED),  # RePCS: Z < τ
        (2.0, 2.0, GROUNDED_HIGH, READ),  # a tie is not flagged
        (3.0, 2.0, GROUNDED_HIGH, READ),
        (0.7, 0.5, MEMORIZED_HIGH, RECALLED),  # a probability of memorized above 0.5
        (0.5, 0.5, MEMORIZED_HIGH, READ),
        (0.2, 0.5, MEMORIZED_HIGH, READ),
        (None, 0.5, MEMORIZED_HIGH, UNCALIBRATED),
        (0.2, None, MEMORIZED_HIGH, UNCALIBRATED),
        (float("nan"), 0.5, MEMORIZED_HIGH, UNCALIBRATED),
    ],
)
def test_verdict_follows_the_detectors_direction(score, threshold, higher, expected):
    assert verdict_for(score, threshold, higher) == expected


def test_verdict_rejects_an_unknown_direction():
    with pytest.raises(ValueError, match="higher_means"):
        verdict_for(1.0, 1.0, "up")


def test_alpha_threshold_is_the_quantile_on_the_memorized_side():
    clean = np.arange(1.0, 101.0)  # 1 … 100
    # numpy's linear interpolation: the 5 % quantile of 1..100 is 1 + 0.05 * 99 = 5.95
    assert alpha_threshold(clean, GROUNDED_HIGH) == pytest.approx(5.95)
    assert alpha_threshold(clean, MEMORIZED_HIGH) == pytest.approx(100 - 0.05 * 99)
    flagged = np.mean(clean < alpha_threshold(clean, GROUNDED_HIGH))
    assert flagged == pytest.approx(0.05), "about a share α of clean prompts is flagged"
    assert alpha_threshold([3.0, np.nan, 4.0], GROUNDED_HIGH, alpha=0.5) == pytest.approx(3.5)
    with pytest.raises(ValueError):
        alpha_threshold([np.nan], GROUNDED_HIGH)
    with pytest.raises(ValueError):
        alpha_threshold([1.0], GROUNDED_HIGH, alpha=1.0)


def test_summary_line_speaks_within_each_group_in_its_own_words():
    line = summary_line([_v("repcs", RECALLED), _v("crm_lts", READ), _v("ppl", READ), _v("zlib", UNCALIBRATED)])
    assert line.startswith("Context reliance: measured by the two paths' token distributions over the answer (RePCS)")
    assert "CRM LTS finds the answer needed the context; RePCS finds the answer did not need the context." in line
    assert "perplexity finds it looks unfamiliar. No verdict here from zlib" in line
    assert "They conflict" not in line and not re.search(r"\d+ of \d+", line), "no count"
    assert summary_line([_v("repcs", INCONCLUSIVE)]).endswith(
        "No verdict here from RePCS (no score, no threshold or too close to call)."
    )
    assert summary_line([_v("min_k_10", READ)]) == (
        "Familiarity of the context text: measured by the context text alone (Min-10%). Min-10% finds it looks "
        "unfamiliar."
    ), "the context baselines never say read/recalled"


def test_the_view_takes_every_cheap_detector_from_the_registry():
    cheap = {d.name for d in cheap_detectors()}
    assert {"repcs", "repcs_mean", "max_token_kl", "crm_lts", "crm_l2", "radar", "ppl", "zlib", "min_k_10"} <= cheap
    assert not cheap & {"selfcritique", "sma", "crm_l2_lr", "crm_lr_cv"}, "no generation, no cross-validated fit"
    assert {"selfcritique", "sma"} <= {d.name for d in costly_detectors()}


def test_assess_scores_the_run_and_picks_up_a_newly_registered_detector(tiny_handle, tiny_result, monkeypatch):
    monkeypatch.setattr(thresholds, "THRESHOLD_DIR", thresholds.THRESHOLD_DIR / "none-here")
    register(Detector("zz_combined", "A combined score", MEMORIZED_HIGH, lambda inp: 0.9, cost="free"))
    try:
        seen = []
        result = assess(tiny_handle, tiny_result, on_detector=lambda i, n, name: seen.append((i, n, name)))
    finally:
        REGISTRY.pop("zz_combined")
    by_name = {v.name: v for v in result.verdicts}
    assert "zz_combined" in by_name and by_name["zz_combined"].score == 0.9
    assert by_name["zz_combined"].verdict == UNCALIBRATED, "no threshold anywhere for an unknown detector"
    assert [s[2] for s in seen] == [v.name for v in result.verdicts] and seen[0][:2] == (0, len(seen))
    repcs = by_name["repcs"]
    assert repcs.score == pytest.approx(float(np.sum(tiny_result.token_kl[:5], dtype=np.float64)), rel=1e-6)
    assert repcs.threshold == tiny_result.threshold and repcs.source == tiny_result.threshold_source
    assert by_name["crm_lts"].score is None and "No CRM basis" in by_name["crm_lts"].error
    radar = by_name["radar"]  # scored from cached features, or skipped (never a 130-prompt build here)
    assert radar.score is not None or "RADAR page" in radar.error
    assert all(v.verdict in VERDICTS for v in result.verdicts if v.name != "radar")
    assert radar.verdict in (agreement.RECALL_TYPE, agreement.REASONING_TYPE, UNCALIBRATED)
    document = json.loads(json.dumps(result.to_dict()))
    assert set(document["repcs"]) >= {"score", "threshold", "verdict", "source"}
    assert {c.name for c in result.costly} >= {"selfcritique", "sma"}
    assert all(c.estimate_s is not None and c.estimate_s > 0 for c in result.costly), "seeded by the run's timings"


def test_a_bundled_calibration_file_gives_thresholds_and_their_source(tiny_handle, tiny_result, tmp_path, monkeypatch):
    document = {
        "model": tiny_handle.info.name,
        "alpha": 0.05,
        "settings": {"score_window": 64},
        "n_clean": 10,
        "n_memorized": 8,
        "detectors": {"ppl": {"threshold": 1e9, "fpr": 0.1, "fnr": 0.25}},
    }
    (tmp_path / f"detectors-{tiny_handle.slug}.json").write_text(json.dumps(document), encoding="utf-8")
    monkeypatch.setattr(calibration_record, "THRESHOLD_DIR", tmp_path)  # where bundled files are looked for
    (ppl,) = assess(tiny_handle, tiny_result, names=["ppl"]).verdicts
    assert ppl.threshold == 1e9 and ppl.verdict == RECALLED, "perplexity below τ: a familiar text, memorized side"
    assert "5%-quantile over 10 clean prompts" in ppl.source and "FPR 10% / FNR 25%" in ppl.source
    assert "calibrated at T = 64, this run used T = 5" in ppl.source
    document["model"] = "another model"
    (tmp_path / f"detectors-{tiny_handle.slug}.json").write_text(json.dumps(document), encoding="utf-8")
    (ppl,) = assess(tiny_handle, tiny_result, names=["ppl"]).verdicts
    assert ppl.threshold is None and ppl.verdict == UNCALIBRATED, "another model's file is not used"


def test_cost_meter_moving_average_and_estimates():
    meter = CostMeter(smoothing=0.5)
    assert estimate_seconds("h", generated_tokens=10, meter=meter) is None
    meter.observe("h", "generated_token", 2.0, 10)  # 0.2 s/token
    meter.observe("h", "generated_token", 4.0, 10)  # 0.4 s/token → average 0.5·0.2 + 0.5·0.4
    assert meter.per_unit("h", "generated_token") == pytest.approx(0.3)
    meter.observe("h", "generated_token", 0.0, 10)  # ignored
    assert meter.measurements("h", "generated_token") == 2
    assert estimate_seconds("h", generated_tokens=100, meter=meter) == pytest.approx(30.0)
    # forwards fall back to the per-token cost until measured
    assert estimate_seconds("h", generated_tokens=10, forwards=5, batch_factor=2, meter=meter) == pytest.approx(7.5)
    with pytest.raises(ValueError):
        meter.observe("h", "lightyears", 1.0, 1.0)
    assert [format_seconds(s) for s in (None, 0.2, 7.4, 42, 130, 4 * 3600)] == [
        "unknown",
        "< 1 s",
        "≈ 7 s",
        "≈ 40 s",
        "≈ 2 min",
        "≈ 4.0 h",
    ]


def test_a_declared_threshold_rule_is_used_and_named(tiny_handle, tiny_result):
    from core.detectors.agreement import detector_threshold
    from core.detectors.registry import DetectorInput, DetectorThreshold

    def own(detector, inp):
        return DetectorThreshold(0.25, "its own calibration")

    detector = Detector("zz_tau", "with τ", MEMORIZED_HIGH, lambda inp: 0.3, thresholds=(lambda d, i: None, own))
    inp = DetectorInput(tiny_handle, tiny_result, tiny_result.run_settings)
    found = detector_threshold(detector, inp)
    assert (found.value, found.source) == (0.25, "its own calibration"), "the first rule that finds one wins"
    assert agreement.judge(detector, inp).verdict == RECALLED, "0.3 > τ = 0.25 on the memorized side"
    bare = Detector("zz_no", "none", MEMORIZED_HIGH, lambda inp: 0.3, thresholds=())
    assert detector_threshold(bare, inp).value is None, "no rule: no threshold"


def test_the_bundled_detector_calibration_agrees_with_the_bundled_repcs_tau():
    """Both files apply RePCS Algorithm 1 to the same 87 clean prompts: their τ for RePCS must agree."""
    from core.engine.threshold import EMBEDDED_THRESHOLD, Threshold

    path = agreement.THRESHOLD_DIR / "detectors-embedded.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    tau = Threshold.load(EMBEDDED_THRESHOLD)
    assert document["n_clean"] == tau.n_clean and document["n_memorized"] == tau.n_memorized
    assert document["detectors"]["repcs"]["threshold"] == pytest.approx(tau.tau, abs=1e-4)
    assert document["detectors"]["repcs"]["fnr"] == pytest.approx(tau.fnr, abs=1e-4)
    for name, entry in document["detectors"].items():
        assert entry["fpr"] <= 0.1, f"{name}: about α of the clean prompts are flagged"


def _radar_input(tiny_handle, tiny_result, label: str, p_recall: float):
    from core.detectors import keys
    from core.detectors.registry import DetectorInput

    inp = DetectorInput(tiny_handle, tiny_result, tiny_result.run_settings)
    inp.cache[keys.RADAR_DETAILS] = {"prediction": {"p_recall": p_recall, "label": label}}
    return inp


@pytest.mark.parametrize(("label", "p_recall"), [("recall", 0.9265), ("reasoning", 0.31), ("recall", 0.97)])
def test_radar_is_never_translated_into_read_or_recalled(tiny_handle, tiny_result, monkeypatch, label, p_recall):
    """Issue 26 item 3: RADAR said "recall, confidence 0.93" while the table read 0.9265 as "Read from the
    context" (threshold 0.9553). Its row carries RADAR's own label, in its own words, out of the summary."""
    from dataclasses import replace

    from core.detectors import get

    document = {"model": tiny_handle.info.name, "detectors": {"radar": {"threshold": 0.9553, "fpr": 0.05}}}
    monkeypatch.setattr(thresholds, "bundled_thresholds", lambda handle, template="": document)
    radar = replace(get("radar"), ready=None)  # scored from the cached details, never built here
    row = agreement.judge(radar, _radar_input(tiny_handle, tiny_result, label, p_recall))
    assert row.score == pytest.approx(p_recall)
    assert row.verdict not in (READ, RECALLED)
    assert row.verdict == (agreement.RECALL_TYPE if label == "recall" else agreement.REASONING_TYPE)
    for words in (agreement.verdict_words(row.verdict), row.says):
        assert words.startswith("Recall" if label == "recall" else "Reasoning") and "RADAR" in words
        assert "context" not in words and "memory" not in words
    line = summary_line([_v("repcs", READ), row])
    assert "RePCS finds the answer needed the context. Recall vs reasoning" in line
    radar_line = line.split("Recall vs reasoning")[1]
    assert f"RADAR finds the query looks like a {label} task" in radar_line and "RePCS" not in radar_line


def test_the_repcs_row_follows_the_tau_in_force_after_a_change(tiny_handle, tiny_result):
    """Issue 26 item 1: after "Back to the default τ" the headline said Inconclusive (τ = 4.275) while the table's
    RePCS row still said Recalled (τ 15.11) and the summary counted it. The row follows the re-decided run."""
    from core.engine.scoring import rejudge
    from core.engine.threshold import Threshold

    name = tiny_handle.info.name
    high = Threshold(tau=tiny_result.repcs_score + 15.0, alpha=0.05, T=5, model=name, source="x")
    before = rejudge(tiny_result, high, "calibrated on the Evaluate page")
    inp = agreement.detector_input(tiny_handle, before)
    view = assess(tiny_handle, before, names=["repcs", "repcs_mean"], inp=inp)
    repcs = next(v for v in view.verdicts if v.name == "repcs")
    assert repcs.verdict == RECALLED and repcs.source == "calibrated on the Evaluate page"
    low = Threshold(tau=tiny_result.repcs_score / 2, alpha=0.05, T=5, model=name, source="y")
    after = rejudge(tiny_result, low, "bundled calibration")
    again = agreement.with_result(view, inp, after)
    repcs = next(v for v in again.verdicts if v.name == "repcs")
    assert (repcs.verdict, repcs.threshold, repcs.source) == (
        after.repcs_verdict,
        after.threshold,
        "bundled calibration",
    )
    assert repcs.verdict == READ and "Recalled" not in again.summary and inp.result is after
    assert [v.score for v in again.verdicts] == [v.score for v in view.verdicts], "no detector re-scored"


def test_rows_come_group_by_group_and_the_json_names_each_group(tiny_handle, tiny_result):
    """Issue 23 part 3: the detectors grouped by the question they answer, in GROUPS order, each JSON entry naming
    its group and the direction of its score; only context reliance and parametric knowledge feed the headline."""
    from core.detectors.registry import GROUPS

    view = assess(tiny_handle, tiny_result)
    order = list(GROUPS)
    entries = view.to_dict()
    positions = [order.index(entry["group"]) for entry in entries.values()]
    assert positions == sorted(positions), "group by group, in GROUPS order"
    assert [d.name for d in cheap_detectors()] == [v.name for v in view.verdicts]
    assert entries["ppl"]["group"] == "context_familiarity" and entries["radar"]["group"] == "recall_vs_reasoning"
    for name, entry in entries.items():
        assert entry["direction"].startswith("higher = "), name
        assert entry["says"] and entry["finding"], name
        assert {"score", "threshold", "verdict", "source", "higher_means"} <= set(entry), "nothing removed"
    assert entries["radar"]["says"] not in ("Read from the context", "Recalled from memory")
    groups = view.groups()
    assert [g["group"] for g in groups] == [g for g in order if g in {g["group"] for g in groups}]
    assert [g["question"] for g in groups] == [GROUPS[g["group"]] for g in groups]
    assert {g["group"] for g in groups if g["feeds_headline"]} == {"context_reliance", "parametric_knowledge"}
    parametric = next(g for g in groups if g["group"] == "parametric_knowledge")
    cheap_parametric = [d.name for d in cheap_detectors() if d.group == "parametric_knowledge"]
    assert parametric["detectors"] == cheap_parametric and "selfcritique" in parametric["not_run"]
    assert parametric["summary"].startswith("Parametric knowledge: ")
    for group in groups:
        others = [v.name for v in view.verdicts if v.group != group["group"]]
        assert set(group["detectors"]).isdisjoint(others), "each group's summary counts its own detectors only"


def test_the_headline_axes_sit_with_the_two_groups_that_feed_them(tiny_handle, tiny_result):
    """Only context reliance and parametric knowledge feed the headline: each shows its axis of
    core.engine.axes, the same as the engine computes it; no other group has one."""
    from core.engine.axes import headline

    view = assess(tiny_handle, tiny_result, names=["repcs", "ppl"])
    expected = headline(tiny_result).to_dict()
    assert view.axes == {
        "context_reliance": expected["context_reliance"],
        "parametric_knowledge": expected["parametric_support"],
    }
    groups = {g["group"]: g for g in view.groups()}
    assert groups["context_reliance"]["headline_axis"]["name"] == "context_reliance"
    assert groups["parametric_knowledge"]["headline_axis"]["name"] == "parametric_support"
    assert "headline_axis" not in groups["context_familiarity"]
    again = agreement.with_result(view, agreement.detector_input(tiny_handle, tiny_result), tiny_result)
    assert again.axes == view.axes, "a τ change keeps the axes"
