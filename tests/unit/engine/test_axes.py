"""The two-axis headline (core.engine.axes) on hand-built DualPathResults: the features against an independent
computation, both axes, the decision table, the joint resolver of its Inconclusive cells and the JSON (schema 4)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from core.engine import DualPathResult, PathOutput
from core.engine.axes import (
    AGREES,
    OVERRODE,
    Axis,
    decide_headline,
    first_content,
    headline,
    joint_features,
    normalize,
    reliance_features,
    support_features,
    with_headline,
)
from core.engine.axes_calibration import JOINT_FEATURES, JointModel
from core.engine.verdict import INCONCLUSIVE, NEITHER, READ, RECALLED, display, normalize_verdict
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
        entropy=np.zeros(n, np.float32),
        logprob=np.asarray(logprob, np.float32),
        topk_ids=np.zeros((n, 1), np.int64),
        topk_probs=np.ones((n, 1), np.float32),
        topk_tokens=[["x"]] * n,
    )


def _result(
    tokens: list[str],
    kl: list[float],
    para_logprob: list[float],
    para_answer: str,
    query: str = "What is the capital of Veltria?",
    context: str = "The capital of Veltria is Marrowgate.",
) -> DualPathResult:
    answer = "".join(tokens)
    retrieval = _path(answer, tokens, [-0.1] * len(tokens))
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
        verdict="uncalibrated",
        kl_stats={},
        max_abs_log_ratio=0.0,
    )


VELTRIA = ["The", " capital", " is", " Marrow", "gate", "."]


def test_normalize_and_first_content_word():
    assert normalize("Kvarnström, Édda!") == "kvarnstrom edda"
    span = first_content(VELTRIA, "What is the capital of Veltria?")
    assert span.word == "marrowgate" and span.positions == (3, 4)  # the query's "capital" and stop words skipped
    assert first_content(["The", " is", " a"], "q") is None


def test_features_match_an_independent_computation():
    kl = [0.5, 2.0, 8.0, 0.25, 0.0, 1.0]
    res = _result(VELTRIA, kl, [-1.0, -2.0, -1.0, -9.5, -7.25, -1.0], "Nova Nova")
    feats = reliance_features(res)
    assert feats["ln_max_kl"] == pytest.approx(math.log(8.0 + 1e-6))
    assert feats["ln_mean_kl"] == pytest.approx(math.log(sum(kl) / 6 + 1e-6))
    assert feats["ln_L"] == pytest.approx(math.log(6))
    sup = support_features(res)
    assert sup["word"] == "marrowgate" and sup["logprob"] == pytest.approx((-9.5 - 7.25) / 2)
    assert sup["in_parametric"] is False and sup["in_context"] is True
    expected = 1 / (1 + math.exp(-2 * math.log(8.0 + 1e-6)))
    assert CAL.reliance(feats) == pytest.approx(expected)


def test_read_and_it_overrode_the_parametric_answer():
    res = _result(VELTRIA, [0.5, 2.0, 8.0, 0.25, 0.0, 1.0], [-1, -1, -1, -9.0, -8.0, -1], "Nova Nova")
    head = headline(res, CAL)
    assert head.reliance.state == "needed" and head.support.state == "unsupported"
    assert head.verdict == READ and head.qualifier == OVERRODE
    assert head.title == f"{display(READ)}, {OVERRODE}"
    assert "8.00" in head.reason and "“Marrowgate”" in head.reason  # numbers and words of this run


def test_recalled_and_the_context_agrees():
    tokens = ["Paris", " is", " the", " capital", "."]
    res = _result(
        tokens,
        [0.05, 0.01, 0.02, 0.01, 0.0],
        [-0.2, -1, -1, -1, -1],
        "The capital of France is Paris.",
        query="What is the capital of France?",
        context="Paris is the capital and largest city of France.",
    )
    head = headline(res, CAL)
    assert head.support.evidence["in_parametric"] is True
    assert (head.verdict, head.qualifier) == (RECALLED, AGREES)


def test_neither_is_a_guess():
    tokens = ["It", " is", " Tal", "ora", "."]
    res = _result(tokens, [0.05, 0.1, 0.2, 0.1, 0.0], [-1, -1, -11.0, -6.0, -1], "I do not know.")
    head = headline(res, CAL)
    assert head.reliance.state == "not needed" and head.support.state == "unsupported"
    assert head.verdict == NEITHER and "guess" in head.reason
    assert normalize_verdict("neither") == NEITHER and display(NEITHER).startswith("Neither")


def _axis(name: str, state: str, **evidence) -> Axis:
    return Axis(name, state, 0.5, 0.5, (0.4, 0.6), "d", {"ln_max_kl": 0.0, **evidence})


@pytest.mark.parametrize(
    ("reliance", "support", "in_context", "in_parametric", "expected"),
    [
        ("needed", "unsupported", True, False, (READ, OVERRODE)),
        ("needed", "mixed", True, None, (READ, None)),
        ("needed", "supported", True, True, (READ, None)),
        ("needed", "supported", False, True, (RECALLED, None)),  # only the wording changed
        ("not needed", "supported", True, True, (RECALLED, AGREES)),
        ("not needed", "supported", False, True, (RECALLED, None)),
        ("not needed", "unsupported", False, False, (NEITHER, None)),
        ("not needed", "mixed", False, False, (INCONCLUSIVE, None)),
        ("mixed", "supported", False, True, (RECALLED, None)),
        ("mixed", "supported", True, True, (INCONCLUSIVE, None)),
        ("mixed", "unsupported", True, False, (READ, OVERRODE)),
        ("mixed", "unsupported", False, False, (INCONCLUSIVE, None)),
        ("mixed", "mixed", True, None, (INCONCLUSIVE, None)),
    ],
)
def test_decision_table(reliance, support, in_context, in_parametric, expected):
    ev = {"word": "lyon", "in_context": in_context, "in_parametric": in_parametric}
    verdict, qualifier, reason = decide_headline(_axis("context_reliance", reliance), _axis("support", support, **ev))
    assert (verdict, qualifier) == expected and reason.endswith(".")
    if verdict == INCONCLUSIVE:
        assert "unclear" in reason or "Mixed evidence" in reason


def _joint(intercept: float) -> JointModel:
    """A joint resolver whose P(read) is σ(intercept) for every run (all coefficients 0)."""
    n = len(JOINT_FEATURES)
    return JointModel(
        mean=(0.0,) * n, scale=(1.0,) * n, coef=(0.0,) * n, intercept=intercept, threshold=0.5, band=(0.3, 0.7)
    )


# Both axes mixed: max KL 1 (P(read) = 0.5, inside [0.4, 0.6]); the word's log-probability −3 inside [−4, −2].
MIXED_RUN = {"kl": [0.5, 1.0, 0.5, 0.25, 0.0, 0.5], "para_logprob": [-1, -1, -1, -3.0, -3.0, -1], "para_answer": "Nova"}


@pytest.mark.parametrize(
    ("intercept", "verdict", "qualifier", "where"),
    [(2.0, READ, OVERRODE, "above"), (-2.0, RECALLED, AGREES, "below"), (0.0, INCONCLUSIVE, None, "inside")],
)
def test_joint_resolver_decides_only_what_the_table_leaves_inconclusive(intercept, verdict, qualifier, where):
    res = _result(VELTRIA, **MIXED_RUN)
    assert headline(res, CAL).verdict == INCONCLUSIVE and headline(res, CAL).joint is None  # no resolver: as before
    head = headline(res, replace(CAL, joint=_joint(intercept)))
    assert (head.reliance.state, head.support.state) == ("mixed", "mixed")
    assert (head.verdict, head.qualifier) == (verdict, qualifier)
    p = 1 / (1 + math.exp(-intercept))
    assert head.joint == {"score": pytest.approx(p), "threshold": 0.5, "band": [0.3, 0.7], "decided": where != "inside"}
    assert f"P(read) = {p:.2f}, {where} the joint band [0.30, 0.70]" in head.reason
    assert head.to_dict()["joint"] == head.joint
    decided = _result(VELTRIA, [0.5, 2.0, 8.0, 0.25, 0.0, 1.0], [-1, -1, -1, -9.0, -8.0, -1], "Nova Nova")
    assert headline(decided, replace(CAL, joint=_joint(-9.0))).verdict == READ  # a decisive cell is never re-judged


def test_joint_features_match_the_axes_observations():
    res = _result(VELTRIA, **MIXED_RUN)
    feats = joint_features(res)
    assert list(feats) == list(JOINT_FEATURES)
    assert feats["ln_max_kl"] == pytest.approx(math.log(1.0 + 1e-6)) and feats["support_logprob"] == pytest.approx(-3.0)
    assert (feats["in_parametric"], feats["not_in_parametric"], feats["in_context"]) == (0.0, 1.0, 1.0)
    assert joint_features(_result(["The", " is", "."], [0.1, 0.1, 0.1], [-1, -1, -1], "x")) is None  # no content word


def test_json_schema_4_headline_on_top_repcs_kept(tmp_path):
    res = _result(VELTRIA, [0.5, 2.0, 8.0, 0.25, 0.0, 1.0], [-1, -1, -1, -9.0, -8.0, -1], "Nova Nova")
    res.verdict, res.verdict_reason = "recalled", "Z below τ"
    data = json.loads(with_headline(res, CAL).to_json())
    assert (
        data["verdict"] == READ and data["axes"]["verdict"] == READ and data["verdict_reason"] == data["axes"]["reason"]
    )
    assert data["repcs_verdict"] == RECALLED and data["repcs_verdict_reason"] == "Z below τ"
    axes = data["axes"]
    assert axes["context_reliance"]["band"] == [0.4, 0.6] and axes["parametric_support"]["threshold"] == -3.0
    back = DualPathResult.from_dict(data)
    assert back.verdict == RECALLED and back.axes == data["axes"]  # RePCS' verdict in memory, headline kept
    assert json.loads(back.to_json())["verdict"] == READ
    plain = json.loads(res.to_json())
    assert plain["axes"] is None and plain["verdict"] == plain["repcs_verdict"] == RECALLED
