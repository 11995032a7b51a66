"""The two-axis headline (core.engine.axes) on hand-built DualPathResults: the observations at the located span
against an independent computation, both axes, the decision table, the joint resolver, a model without its own
calibration, and the JSON (schema 4)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from core.engine import DualPathResult, PathOutput
from core.engine.axes import (
    AGREES,
    ALSO_KNOWN,
    BY_TEXT,
    MIXED,
    NEEDED,
    NOT_NEEDED,
    OVERRODE,
    SUPPORTED,
    UNSUPPORTED,
    Axis,
    Observations,
    decide_headline,
    feature_values,
    headline,
    observe,
    with_headline,
)
from core.engine.axes_calibration import AGREEMENT_FEATURES, JOINT_FEATURES, JointModel
from core.engine.span import AnswerSpan
from core.engine.verdict import INCONCLUSIVE, NEITHER, READ, RECALLED, UNCALIBRATED, display
from tests.unit.engine.conftest import CAL


def _path(answer: str, tokens: list[str], logprob: list[float], finish: str = "eos") -> PathOutput:
    n = len(logprob)
    return PathOutput(
        prompt="p",
        prompt_len=3,
        answer=answer,
        token_ids=list(range(len(tokens))),
        tokens=tokens,
        finish=finish,
        entropy=np.linspace(1.0, 2.0, n).astype(np.float32),
        logprob=np.asarray(logprob, np.float32),
        topk_ids=np.zeros((n, 1), np.int64),
        topk_probs=np.ones((n, 1), np.float32),
        topk_tokens=[["x"]] * n,
    )


def _result(
    tokens: list[str],
    kl: list[float],
    rag_logprob: list[float],
    para_logprob: list[float],
    para_answer: str,
    query: str = "What is the capital of Veltria?",
    context: str = "The capital of Veltria is Marrowgate.",
    finish: str = "length",
) -> DualPathResult:
    retrieval = _path("".join(tokens), tokens, rag_logprob, finish)
    parametric = _path(para_answer, ["y"], para_logprob, finish="eos" if para_answer else "not generated")
    return DualPathResult(
        model="m",
        model_info={},
        query=query,
        context=context,
        template="auto",
        settings={},
        retrieval=retrieval,
        parametric=parametric,
        token_kl=np.asarray(kl, np.float32),
        score_window=64,
        repcs_score=float(np.sum(kl)),
        threshold=None,
        threshold_source="none",
        repcs_verdict="uncalibrated",
        kl_stats={},
        max_abs_log_ratio=0.0,
    )


VELTRIA = ["The", " capital", " is", " Marrow", "gate", "."]
KL = [0.5, 2.0, 0.4, 3.0, 0.25, 1.0]
RAG_LP = [-0.1, -0.2, -0.1, -0.5, -0.25, -0.3]


def test_observations_at_the_span_match_an_independent_computation():
    para_lp = [-1.0, -2.0, -1.0, -9.5, -7.25, -1.0]
    res = _result(VELTRIA, KL, RAG_LP, para_lp, "Nova Nova")
    obs = observe(res, CAL.span_level)
    assert obs.span.text == "Marrowgate" and obs.span.head_positions == (3, 4)  # "capital" is the query's
    assert obs.llr == pytest.approx((-0.5 - 0.25) - (-9.5 - 7.25))
    assert obs.kl == pytest.approx(3.0) and obs.lp_parametric == pytest.approx(-16.75)
    assert obs.entropy_parametric == pytest.approx(np.linspace(1.0, 2.0, 6)[3])
    assert (obs.in_context, obs.in_parametric) == (True, False)
    assert obs.max_kl == pytest.approx(3.0) and obs.mean_kl == pytest.approx(np.mean(KL), rel=1e-6)
    feats = feature_values(obs, ("span_llr", "ln_span_kl", "ln_L"))
    assert feats == {"span_llr": pytest.approx(16.0), "ln_span_kl": pytest.approx(math.log(3.0 + 1e-6)),
                     "ln_L": pytest.approx(math.log(6))}  # fmt: skip
    assert CAL.reliance(feats) == pytest.approx(1 / (1 + math.exp(-16.0)))


def test_the_end_token_is_not_part_of_the_answer():
    tokens = ["It", " is", " Blorb", "<|im_end|>"]
    res = _result(tokens, [0.1, 0.1, 2.0, 5.0], [-1, -1, -1, -1], [-1, -1, -5, -9], "x", context="It is Blorb.",
                  finish="eos")  # fmt: skip
    obs = observe(res, 1.0)
    assert obs.span.text == "Blorb" and obs.window == 3 and obs.max_kl == pytest.approx(2.0)


def test_read_and_it_overrode_the_parametric_answer():
    res = _result(VELTRIA, KL, RAG_LP, [-1, -1, -1, -9.5, -7.25, -1], "Nova Nova")
    head = headline(res, CAL)
    assert head.reliance.state == NEEDED and head.support.state == UNSUPPORTED
    assert head.verdict == READ and head.qualifier == OVERRODE
    assert head.title == f"{display(READ)}, {OVERRODE}"
    # the numbers quoted are those shown beside them: the KL at the span, the LLR, P(read), the log-probability
    for number in ("3.00", "16.00", f"{head.reliance.score:.2f}", "-16.75"):
        assert number in head.reason
    assert "“Marrowgate”" in head.reason and head.span["span"]["text"] == "Marrowgate"


def _paris_agreeing():
    """A run whose context and no-context answer agree on "Paris", barely moved by the context."""
    tokens = ["Paris", " is", " the", " capital", "."]
    return _result(
        tokens, [0.05, 0.01, 0.02, 0.01, 0.0], [-5.0, -1, -1, -1, -1], [-4.5, -1, -1, -1, -1],
        "The capital of France is Paris.", query="What is the capital of France?",
        context="Paris is the capital and largest city of France.",
    )  # fmt: skip


def test_recalled_and_the_context_agrees_decided_by_the_text():
    res = _paris_agreeing()
    head = headline(res, CAL)
    assert head.reliance.state == NOT_NEEDED
    # the context lowered "Paris" a little (LLR −0.5 nats: not needed); its log-probability −4.5 is below the support
    # band, but the answer without the context names Paris: the axis says supported and that the text decided it
    assert head.support.state == SUPPORTED and head.support.decided_by == BY_TEXT
    assert (head.verdict, head.qualifier) == (RECALLED, AGREES)
    assert "without the context the model says “Paris” too" in head.reason


def test_neither_is_a_guess():
    tokens = ["It", " is", " Tal", "ora", "."]
    res = _result(tokens, [0.05, 0.1, 0.2, 0.1, 0.0], [-1, -1, -11.0, -6.0, -1], [-1, -1, -10.5, -6.0, -1],
                  "I do not know.")  # fmt: skip
    head = headline(res, CAL)
    assert head.reliance.state == NOT_NEEDED and head.support.state == UNSUPPORTED
    assert head.verdict == NEITHER and "guess" in head.reason


def _obs(in_context: bool | None, in_parametric: bool | None) -> Observations:
    span = AnswerSpan("Lyon", "lyon", (0,), (0,), 1.0, 1.0, True, "test")
    return Observations(span, 0.5, 1.0, -3.0, -0.5, 1.0, in_context, in_parametric, 5, 1.0, 0.5)


def _axis(name: str, state: str, decided_by: str = "score") -> Axis:
    return Axis(name, state, 0.5, 0.5, (0.4, 0.6), "d", {}, decided_by)


@pytest.mark.parametrize(
    ("reliance", "support", "in_context", "in_parametric", "expected"),
    [
        (NEEDED, UNSUPPORTED, True, False, (READ, OVERRODE)),
        (NEEDED, MIXED, True, None, (READ, None)),
        (NEEDED, SUPPORTED, True, True, (READ, ALSO_KNOWN)),
        (NEEDED, SUPPORTED, False, True, (READ, ALSO_KNOWN)),  # a confident axis 1 is never overturned by the text
        (NOT_NEEDED, SUPPORTED, True, True, (RECALLED, AGREES)),
        (NOT_NEEDED, SUPPORTED, False, True, (RECALLED, None)),
        (NOT_NEEDED, UNSUPPORTED, True, False, (NEITHER, None)),  # ... nor a confident "not needed"
        (NOT_NEEDED, MIXED, False, False, (INCONCLUSIVE, None)),
        (MIXED, SUPPORTED, False, True, (RECALLED, None)),
        (MIXED, SUPPORTED, True, None, (RECALLED, AGREES)),
        (MIXED, UNSUPPORTED, True, False, (READ, OVERRODE)),
        (MIXED, UNSUPPORTED, False, False, (INCONCLUSIVE, None)),
        (MIXED, MIXED, True, True, (INCONCLUSIVE, None)),
    ],
)
def test_decision_table(reliance, support, in_context, in_parametric, expected):
    rel, sup = _axis("context_reliance", reliance), _axis("parametric_support", support)
    verdict, qualifier, reason = decide_headline(_obs(in_context, in_parametric), rel, sup)
    assert (verdict, qualifier) == expected and reason.endswith(".")
    if verdict == INCONCLUSIVE:
        assert "unclear" in reason or "Mixed evidence" in reason


def test_a_model_without_its_own_calibration_gets_no_borrowed_verdict():
    res = replace(_result(VELTRIA, KL, RAG_LP, [-1, -1, -1, -9.5, -7.25, -1], "Nova"), model="another/model")
    head = headline(res, CAL)  # CAL was made for "m"
    assert head.verdict == UNCALIBRATED and head.reliance.state == MIXED and head.reliance.threshold is None
    assert "Not calibrated for this model" in head.reason and "calibrate-model" in head.reason
    assert "m is not used" in head.reason  # the other model's calibration is named, never applied
    assert head.span["llr"] == pytest.approx(16.0)  # the raw observations are still shown


def _joint(intercept: float) -> JointModel:
    """A joint resolver whose P(read) is σ(intercept) for every run (all coefficients 0)."""
    n = len(JOINT_FEATURES)
    return JointModel(
        mean=(0.0,) * n, scale=(1.0,) * n, coef=(0.0,) * n, intercept=intercept, threshold=0.5, band=(0.3, 0.7)
    )


# Both axes mixed: the span's LLR is 0 (P(read) = 0.5, inside [0.4, 0.6]); its log-probability −3 inside [−4, −2].
MIXED_RUN = ([0.5, 1.0, 0.5, 1.5, 0.0, 0.5], [-1, -1, -1, -1.5, -1.5, -1], [-1, -1, -1, -1.5, -1.5, -1], "Marrowgate")
NOT_STATED = "The capital of Veltria is not recorded."


@pytest.mark.parametrize(
    ("intercept", "verdict", "where"),
    [(2.0, READ, "above"), (-2.0, RECALLED, "below"), (0.0, INCONCLUSIVE, "inside")],
)
def test_joint_resolver_decides_only_what_the_table_leaves_inconclusive(intercept, verdict, where):
    res = _result(VELTRIA, *MIXED_RUN)
    cal = replace(CAL, support_band=(-4.0, -2.0), support_threshold=-3.0)
    head = headline(res, cal)
    # supported by the text (the no-context answer names it) and mixed reliance: recalled, the context agrees
    assert (head.reliance.state, head.support.state, head.verdict) == (MIXED, SUPPORTED, RECALLED)
    # neither in the context nor in the no-context answer: the text says nothing either way
    res = replace(res, context=NOT_STATED, parametric=replace(res.parametric, answer="Nova"))
    assert headline(res, cal).verdict == INCONCLUSIVE and headline(res, cal).joint is None
    head = headline(res, replace(cal, joint=_joint(intercept)))
    assert (head.reliance.state, head.support.state) == (MIXED, MIXED)
    assert (head.verdict, head.qualifier) == (verdict, OVERRODE if verdict == READ else None)
    p = 1 / (1 + math.exp(-intercept))
    assert head.joint == {"score": pytest.approx(p), "threshold": 0.5, "band": [0.3, 0.7], "decided": where != "inside"}
    assert f"P(read) = {p:.2f}, {where} the joint band [0.30, 0.70]" in head.reason
    decided = _result(VELTRIA, KL, RAG_LP, [-1, -1, -1, -9.5, -7.25, -1], "Nova Nova")
    assert headline(decided, replace(CAL, joint=_joint(-9.0))).verdict == READ  # a decisive cell is never re-judged


def test_json_schema_4_headline_on_top_repcs_kept():
    res = _result(VELTRIA, KL, RAG_LP, [-1, -1, -1, -9.5, -7.25, -1], "Nova Nova")
    res.repcs_verdict, res.repcs_verdict_reason = "recalled", "Z below τ"
    data = json.loads(with_headline(res, CAL).to_json())
    assert (
        data["verdict"] == READ and data["axes"]["verdict"] == READ and data["verdict_reason"] == data["axes"]["reason"]
    )
    assert data["repcs_verdict"] == RECALLED and data["repcs_verdict_reason"] == "Z below τ"
    axes = data["axes"]
    assert axes["context_reliance"]["band"] == [0.4, 0.6] and axes["parametric_support"]["threshold"] == -3.0
    assert axes["span"]["span"]["text"] == "Marrowgate" and axes["span"]["span"]["why"]
    back = DualPathResult.from_dict(data)
    assert back.axes == data["axes"]
    assert (back.verdict, back.repcs_verdict, back.repcs_verdict_reason) == (READ, RECALLED, "Z below τ")
    assert json.loads(back.to_json())["verdict"] == READ


@pytest.mark.parametrize(("followed", "verdict"), [(14, READ), (3, RECALLED), (8, INCONCLUSIVE)])
def test_an_agreement_base_rate_decides_agreeing_runs_and_says_it_is_the_model_s_habit(followed, verdict):
    """Where context and memory agree and axis 1 is not needed, a base-rate resolver (too few agreeing calibration
    rows kept their own answer to fit a regression) gives every such run its rate, and the reason says so."""
    from core.methods.axes_fit import fit_agreement

    n = 17
    prior = fit_agreement(
        np.zeros((n, len(AGREEMENT_FEATURES))), np.array([True] * followed + [False] * (n - followed))
    )
    assert prior is not None and prior.prior == (followed, n)
    res = _paris_agreeing()
    assert headline(res, CAL).verdict == RECALLED  # without a resolver: the text decides, the context agrees
    head = headline(res, replace(CAL, agreement=prior))
    p = (followed + 1) / (n + 2)
    assert head.verdict == verdict and head.joint["resolver"] == "agreement"
    assert head.joint["score"] == pytest.approx(p, abs=1e-6)
    assert f"followed a swapped context on {followed} of {n} calibration runs" in head.reason
    assert "its habit, not a reading of this run" in head.reason and f"= {p:.2f}" in head.reason
