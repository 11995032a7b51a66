"""Fitting the headline on calibration rows only (core.evaluation.headline_fit): labels, the refusal of report rows,
the provenance of every choice, and the bundled calibration's fitted rows checked against the bundled split."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest

from core.engine import DualPathResult, PathOutput
from core.engine.axes import headline
from core.engine.axes_calibration import bundled_axes
from core.engine.swap import FOLLOWED, KEPT, NOT_APPLICABLE, SwapTest
from core.evaluation.constructions import AGREEING, CALIBRATION, CONFLICT, REPORT, TEMPLATED, ValidationRow
from core.evaluation.headline_fit import Scored, behavior_of, fit_calibration, knows_answer, measure, row_key
from core.io import asset_path


def _path(answer: str, tokens: list[str], logprob: list[float]) -> PathOutput:
    n = len(tokens)
    return PathOutput("p", 3, answer, list(range(n)), tokens, "length", np.ones(n, np.float32),
                      np.asarray(logprob, np.float32), np.zeros((n, 1), np.int64), np.ones((n, 1), np.float32),
                      [["x"]] * n)  # fmt: skip


def _scored(i: int, read: bool, split: str = CALIBRATION, relation: str = CONFLICT) -> Scored:
    """A conflict row on subject ``Land{i}``: read rows answer the context's object (the context raised it),
    recalled rows the remembered one (the context lowered it a little)."""
    rng = np.random.default_rng(i)
    obj_ctx, obj_mem = f"Zorb{i}", f"Krat{i}"
    word = obj_ctx if read else obj_mem
    tokens = ["It", " is", f" {word}", "."]
    llr = rng.uniform(2.0, 6.0) if read else rng.uniform(-2.0, -0.2)
    rag = [-0.1, -0.1, -0.3, -0.1]
    para = [-0.1, -0.1, -0.3 - llr, -0.1]
    kl = [0.1, 0.1, abs(llr) / 2 + rng.uniform(0, 0.5), 0.1]
    query = f"Where is Land{i}?"
    context = f"Land{i} is in {obj_ctx}."
    row = ValidationRow(TEMPLATED, relation, "test", query, context, [obj_ctx], [obj_mem], f"Land{i}", str(i), split)
    res = DualPathResult(
        model="m", model_info={}, query=query, context=context, template="auto", settings={},
        retrieval=_path("".join(tokens), tokens, rag), parametric=_path(f"It is {obj_mem}.", ["y"] * 4, para),
        token_kl=np.asarray(kl, np.float32), score_window=64, repcs_score=float(sum(kl)), threshold=None,
        threshold_source="none", repcs_verdict="uncalibrated", kl_stats={}, max_abs_log_ratio=0.0,
    )  # fmt: skip
    return Scored(row, res)


ROWS = [_scored(i, read=i % 3 != 0) for i in range(60)]


def test_labels_come_from_the_text_or_the_swap_test():
    assert behavior_of(ROWS[1]) == "read" and behavior_of(ROWS[0]) == "recalled"
    agreeing = _scored(1, True, relation=AGREEING)
    assert behavior_of(agreeing) is None  # no swap test: the text cannot tell
    agreeing.swap = SwapTest(FOLLOWED, "Zorb1", "Quax")
    assert behavior_of(agreeing) == "read"
    agreeing.swap = SwapTest(NOT_APPLICABLE)
    assert behavior_of(agreeing) is None
    assert knows_answer(ROWS[0]) and not knows_answer(ROWS[1])


def test_the_fit_refuses_report_rows():
    with pytest.raises(ValueError, match="1 report rows given to the fit"):
        fit_calibration([*ROWS[:10], _scored(99, True, split=REPORT)], "m", choose_features=False)


def test_every_choice_is_recorded_with_the_rows_it_was_made_on():
    cal = fit_calibration(ROWS, "m")
    choices = cal.provenance["choices"]
    assert choices[0]["what"] == "span level κ (nats)" and choices[1]["what"].startswith("axis 1 features")
    assert choices[0]["rows"]["n"] == 60 and len(choices[0]["rows"]["sha256"]) == 64
    assert str(cal.span_level) in choices[0]["candidates"] and list(cal.features) == choices[1]["chosen"]["features"]
    assert choices[1]["chosen"]["agreement_resolver"] is False and cal.agreement is None  # no agreeing rows
    assert sorted(cal.provenance["fitted_rows"]) == sorted(row_key(s.row) for s in ROWS)
    fig = measure(ROWS, cal)
    assert fig["headline"]["n"] == 60 and fig["headline"]["match_rate"] > 0.9  # separable by construction


def _agreeing(i: int, follows: bool) -> Scored:
    """A row whose context agrees with memory (the answer, the context and the no-context answer all name
    ``Zorb{i}``), labeled by its swap test. The context barely moves any of them (axis 1 cannot tell them apart);
    rows that follow a swap are those the model was unsure of without the context (high entropy there)."""
    s = _scored(i, True, relation=AGREEING)
    rng = np.random.default_rng(1000 + i)
    llr = rng.uniform(0.0, 0.2)
    para = [-0.1, -0.1, -0.3 - llr, -0.1]
    kl = [0.1, 0.1, llr / 2 + rng.uniform(0, 0.05), 0.1]
    parametric = _path(f"It is Zorb{i}.", ["It", " is", f" Zorb{i}", "."], para)
    parametric.entropy[2] = rng.uniform(2.5, 3.5) if follows else rng.uniform(0.2, 0.6)
    s.result = replace(s.result, parametric=parametric, token_kl=np.asarray(kl, np.float32))
    s.swap = SwapTest(FOLLOWED if follows else KEPT, f"Zorb{i}", "Quax")
    return s


def test_the_agreement_resolver_decides_where_context_and_memory_agree():
    """Where the span is in the context and in the no-context answer, the text cannot tell; the resolver, fitted
    on swap-test labels, is chosen by cross-validation when it helps, and the headline says it decided."""
    agreeing = [_agreeing(100 + i, follows=i % 2 == 0) for i in range(40)]
    cal = fit_calibration([*ROWS, *agreeing], "m")
    assert cal.provenance["choices"][1]["chosen"]["agreement_resolver"] is True and cal.agreement is not None
    head = headline(agreeing[0].result, cal)
    assert head.joint is not None and head.joint["resolver"] == "agreement"
    assert "the text cannot tell" in head.reason
    decided = [s for s in agreeing if headline(s.result, cal).verdict in ("read", "recalled")]
    assert len(decided) >= 30
    assert np.mean([headline(s.result, cal).verdict == behavior_of(s) for s in decided]) > 0.9


def test_the_bundled_calibration_was_fitted_on_calibration_rows_only():
    """Each fitted row key of the bundled calibration is a calibration row of the bundled split (compares the
    digests of the rows' texts; fails if a report row, or a row not in the split at all, was fitted)."""
    cal = bundled_axes()
    with (asset_path("validation") / "rows.csv").open(encoding="utf-8", newline="") as fh:
        rows = [ValidationRow.from_dict(r) for r in csv.DictReader(fh)]
    split = {row_key(r): r.split for r in rows}
    fitted = cal.provenance.get("fitted_rows", [])
    assert len(fitted) > 300
    assert {split.get(k) for k in fitted} == {CALIBRATION}
    for choice in cal.provenance["choices"]:
        assert choice["rows"]["n"] <= len(fitted)
