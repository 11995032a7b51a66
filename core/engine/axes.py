"""The headline verdict on two axes, read from the model's internals at the answer span the model itself locates.

Use: ``headline(result)`` → :class:`Headline` (``.verdict``, ``.title``, ``.reason``, ``.reliance``, ``.support``,
``.span``; ``.to_dict()`` is the ``axes`` object of ``run --json``). No model call.

1. **The answer span** (:func:`core.engine.span.locate_span`): where the context moved the answer — among the
   words of the question's kind (a name for *who*, a number for *how many* …), the first found in the context or
   in the no-context answer whose per-token KL reaches the calibrated level κ (PECoRe's context-sensitive token
   identification). Everything below is read *at that span*; an answer that names no word of the question's kind,
   or names one found in neither source that the model does not give without the context, is said to be so
   (:func:`core.engine.span.unanswered`).
2. **Axis 1, context reliance** — did the answer need the context? A logistic regression on what the run measured
   at the span (:data:`FEATURES`: the log-likelihood ratio ``log P(span | context) − log P(span | no context)`` in
   nats, the KL there …), fitted on behavior-labeled calibration rows (``scripts/validate_headline.py fit``;
   coefficients in JSON, no pickle). Its score is P(read); ``≥`` the band's upper edge ⇒ *needed*, ``≤`` its lower
   edge ⇒ *not needed*, inside ⇒ *mixed*.
3. **Axis 2, parametric support** — would the model give this answer without the context? The parametric path's
   log-probability of the span (teacher-forced, nats) against its calibrated cut and band, unless the model's
   own no-context answer contains the span word: then it is *supported* and the axis says that the text decided.
4. **The headline** (:func:`decide_headline`): a confident axis 1 is never overturned by a text flag —
   *needed* ⇒ *Read from the context*; *not needed* ⇒ *Recalled from memory* when supported, *Neither: a guess*
   when unsupported; only when axis 1 is *mixed* do the span's text comparisons (is it in the context, in the
   no-context answer) and axis 2 decide, and *Inconclusive* is left where they disagree, with the reason.

RePCS' own Z-vs-τ(L) verdict stays on the result (``result.repcs_verdict``) and in the agreement view as a
detector. A model without its own axes calibration gets no verdict: *Not calibrated for this model*, with the raw
observations and how to calibrate (never another model's cut under a footnote).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from core.engine.axes_calibration import AxesCalibration, JointModel
from core.engine.calibration_record import ModelCalibration, record_of_result
from core.engine.headline_record import (  # noqa: F401 - the names the pages, tests and earlier callers import here
    AGREES,
    ALSO_KNOWN,
    BY_SCORE,
    BY_TEXT,
    HOW_TO_CALIBRATE,
    MIXED,
    NEEDED,
    NOT_CALIBRATED,
    NOT_NEEDED,
    OVERRODE,
    RELIANCE,
    RELIANCE_DIRECTION,
    SUPPORT,
    SUPPORT_DIRECTION,
    SUPPORTED,
    UNSUPPORTED,
    Axis,
    Headline,
)
from core.engine.span import AnswerSpan, locate_span, said_conflicts, span_logprob, unanswered
from core.engine.verdict import INCONCLUSIVE, NEITHER, READ, RECALLED, UNCALIBRATED
from core.model.calibration_store import calibrate_command

if TYPE_CHECKING:
    from core.engine.result import DualPathResult


KL_FLOOR = 1e-6
"""Added to KL values before the logarithm (a KL of exactly 0 would give −∞)."""


@dataclass(frozen=True)
class Observations:
    """What the headline reads from one run (all from the run's own two paths; no model call).

    Attributes:
        span: the located answer span (``None``: the answer has no content word).
        llr: ``log P_retrieval(span) − log P_parametric(span)`` over the span's head tokens (nats): how much the
            context raised the answer's content.
        kl: the largest per-token KL at the head (nats).
        lp_parametric, lp_retrieval: the head's log-probability on each path (nats, summed over its tokens).
        entropy_parametric: the entropy of the parametric distribution at the head's first token (nats).
        in_context: the context contains the span word; in_parametric: the model's own no-context answer does
            (``None`` when that answer was not generated).
        window: the answer tokens the span was looked for in (the run's score window, without the end token).
        max_kl, mean_kl: the largest and the mean per-token KL over that window (nats).
    """

    span: AnswerSpan | None
    llr: float | None
    kl: float | None
    lp_parametric: float | None
    lp_retrieval: float | None
    entropy_parametric: float | None
    in_context: bool | None
    in_parametric: bool | None
    window: int
    max_kl: float | None
    mean_kl: float | None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["span"] = None if self.span is None else self.span.to_dict()
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


def _ln(x: float | None) -> float | None:
    return None if x is None else math.log(x + KL_FLOOR)


FEATURES: dict[str, Callable[[Observations], float | None]] = {
    "span_llr": lambda o: o.llr,
    "ln_span_kl": lambda o: _ln(o.kl),
    "span_lp_parametric": lambda o: o.lp_parametric,
    "span_lp_retrieval": lambda o: o.lp_retrieval,
    "span_entropy_parametric": lambda o: o.entropy_parametric,
    "ln_max_kl": lambda o: _ln(o.max_kl),
    "ln_mean_kl": lambda o: _ln(o.mean_kl),
    "ln_L": lambda o: math.log(o.window) if o.window else None,
    "in_context": lambda o: None if o.span is None else float(bool(o.in_context)),
    "in_parametric": lambda o: None if o.span is None else float(o.in_parametric is True),
    "not_in_parametric": lambda o: None if o.span is None else float(o.in_parametric is False),
}
"""Every observation an axis or the joint resolver may be fitted on, by name (a calibration file names its own)."""


def content_tokens(result: DualPathResult) -> list[str]:
    """The retrieval answer's tokens without a final end-of-sequence token (its text is not the answer's)."""
    tokens = list(result.retrieval.tokens)
    return tokens[:-1] if result.retrieval.finish == "eos" and tokens else tokens


def observe(result: DualPathResult, level: float | None) -> Observations:
    """The :class:`Observations` of ``result`` with the span level κ = ``level``."""
    tokens = content_tokens(result)
    window = min(len(tokens), int(result.score_window))
    generated = result.parametric.finish != "not generated" and bool(result.parametric.answer)
    kl = np.asarray(result.token_kl[:window], dtype=np.float64)
    span = locate_span(
        tokens,
        kl,
        result.query,
        context=result.context,
        parametric_answer=result.parametric.answer if generated else "",
        window=window,
        level=level,
        cut=result.retrieval.finish == "length" and window == len(tokens),
    )
    max_kl = float(kl.max()) if kl.size else None
    mean_kl = float(kl.mean()) if kl.size else None
    if span is None:
        return Observations(None, None, None, None, None, None, None, None, window, max_kl, mean_kl)
    head = span.head_positions
    lp_r = span_logprob(result.retrieval.logprob, head)
    lp_p = span_logprob(result.parametric.logprob, head)
    entropy = np.asarray(result.parametric.entropy, dtype=np.float64)
    return Observations(
        span=span,
        llr=lp_r - lp_p,
        kl=span.kl,
        lp_parametric=lp_p,
        lp_retrieval=lp_r,
        entropy_parametric=float(entropy[head[0]]) if head[0] < entropy.size else None,
        in_context=span.context_form is not None,  # the head word, or a near form of it ("Rome" for "Roma")
        in_parametric=(span.parametric_form is not None) if generated else None,
        window=window,
        max_kl=max_kl,
        mean_kl=mean_kl,
    )


def feature_values(obs: Observations, names: tuple[str, ...]) -> dict[str, float] | None:
    """The named :data:`FEATURES` of ``obs`` (``None`` when one is not computable, e.g. no span)."""
    out = {}
    for name in names:
        value = FEATURES[name](obs)
        if value is None or not math.isfinite(value):
            return None
        out[name] = float(value)
    return out


def _state(score: float | None, cut: float, band: tuple[float, float], high: str, low: str) -> str:
    """``high`` / ``low`` by the side of ``cut``; :data:`MIXED` inside a band of non-zero width (or no score)."""
    if score is None or (band[0] < band[1] and band[0] <= score <= band[1]):
        return MIXED
    return high if score >= cut else low


def reliance_axis(obs: Observations, cal: AxesCalibration) -> Axis:
    """Axis 1 under ``cal``: P(read) from the calibration's features of ``obs``."""
    feats = feature_values(obs, cal.features)
    score = None if feats is None else cal.reliance(feats)
    band = (float(cal.reliance_band[0]), float(cal.reliance_band[1]))
    evidence = {k: round(v, 6) for k, v in (feats or {}).items()}
    return Axis(RELIANCE, _state(score, cal.reliance_threshold, band, NEEDED, NOT_NEEDED), score,
                cal.reliance_threshold, band, RELIANCE_DIRECTION, evidence)  # fmt: skip


def support_axis(obs: Observations, cal: AxesCalibration) -> Axis:
    """Axis 2 under ``cal``: *supported* when the no-context answer contains the span word (decided by the text),
    else the span's parametric log-probability against the cut and band."""
    band = (float(cal.support_band[0]), float(cal.support_band[1]))
    evidence = {"in_parametric": obs.in_parametric, "in_context": obs.in_context}
    if obs.in_parametric:
        return Axis(SUPPORT, SUPPORTED, obs.lp_parametric, cal.support_threshold, band, SUPPORT_DIRECTION, evidence,
                    BY_TEXT)  # fmt: skip
    state = _state(obs.lp_parametric, cal.support_threshold, band, SUPPORTED, UNSUPPORTED)
    return Axis(SUPPORT, state, obs.lp_parametric, cal.support_threshold, band, SUPPORT_DIRECTION, evidence)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _phrases(obs: Observations, reliance: Axis, support: Axis) -> dict[str, str]:
    """The pieces the reasons are written from; every number is the one the page shows beside it."""
    span = obs.span
    w = f"“{span.text}”" if span else "the answer"
    moved = (
        f"the context moved {w} (per-token KL {_num(obs.kl)} nats there; it raised its log-probability by "
        f"{_num(obs.llr)} nats; P(read) = {_num(reliance.score)})"
    )
    still = (
        f"the context barely moved {w} (per-token KL {_num(obs.kl)} nats there; log-probability change "
        f"{_num(obs.llr)} nats; P(read) = {_num(reliance.score)})"
    )
    between = (
        f"the context's effect on {w} is in between (per-token KL {_num(obs.kl)} nats; log-probability change "
        f"{_num(obs.llr)} nats; P(read) = {_num(reliance.score)}, inside the band)"
    )
    if support.decided_by == BY_TEXT:
        para = f"without the context the model says {w} too"
    else:
        para = f"without the context the model gives {w} log-probability {_num(support.score)} nats"
        if obs.in_parametric is False:
            para += " and answers otherwise"
    return {"w": w, "moved": moved, "still": still, "between": between, "para": para}


def decide_headline(obs: Observations, reliance: Axis, support: Axis) -> tuple[str, str | None, str]:
    """The decision table: ``(verdict, qualifier, reason)``.

    =============  ==========================  =====================================  ===========================
    reliance       supported                   mixed                                  unsupported
    =============  ==========================  =====================================  ===========================
    needed         read ("also says it"        read                                   read, "overrode"
                   when the no-context
                   answer has the span)
    mixed          recalled (the text: span    in context, not in the no-context      read if the span is in the
                   not in the context) or      answer → read; in it, not in the       context, else inconclusive
                   recalled, "agrees"          context → recalled; else inconclusive
    not needed     recalled (+ "agrees")       recalled if the no-context answer      neither (a guess)
                                               has the span, else inconclusive
    =============  ==========================  =====================================  ===========================
    """
    p = _phrases(obs, reliance, support)
    w, r, s = p["w"], reliance.state, support.state
    in_ctx, in_para = obs.in_context, obs.in_parametric
    if r == NEEDED:
        qualifier = ALSO_KNOWN if in_para else OVERRODE if (in_para is False or s == UNSUPPORTED) else None
        return READ, qualifier, f"{_cap(p['moved'])}; {p['para']}."
    if r == NOT_NEEDED:
        if s == SUPPORTED:
            return RECALLED, AGREES if in_ctx else None, f"{_cap(p['still'])}; {p['para']}."
        if s == UNSUPPORTED:
            return NEITHER, None, f"{_cap(p['still'])}, yet {p['para']}: a guess."
        if in_para:
            return RECALLED, AGREES if in_ctx else None, f"{_cap(p['still'])}; {p['para']}."
        return INCONCLUSIVE, None, f"{_cap(p['still'])}, but whether the model knows {w} is unclear ({p['para']})."
    if in_ctx and in_para is False:
        return READ, OVERRODE, f"{_cap(p['between'])}; {w} is in the context and {p['para']}."
    if in_para and not in_ctx:
        return RECALLED, None, f"{_cap(p['between'])}; {w} is not in the context and {p['para']}."
    if s == SUPPORTED:
        return RECALLED, AGREES if in_ctx else None, f"{_cap(p['between'])}; {p['para']}."
    if s == UNSUPPORTED and in_ctx:
        return READ, None, f"{_cap(p['between'])}; {w} is in the context and {p['para']}."
    where = "is in the context" if in_ctx else "is not in the context"
    return INCONCLUSIVE, None, f"Mixed evidence: {p['between']}; {w} {where} and {p['para']}."


def uncalibrated(result: DualPathResult, calibration: AxesCalibration | None = None) -> Headline:
    """The headline of a model without its own axes calibration: no verdict, the raw observations, and how to
    calibrate (a calibration of another model is named, never used)."""
    obs = observe(result, None)
    rel = Axis(RELIANCE, MIXED, None, None, None, RELIANCE_DIRECTION, {"span_llr": obs.llr, "span_kl": obs.kl})
    sup = Axis(SUPPORT, MIXED, obs.lp_parametric, None, None, SUPPORT_DIRECTION,
               {"in_parametric": obs.in_parametric, "in_context": obs.in_context})  # fmt: skip
    other = "" if calibration is None else f" (the axes calibration of {calibration.model} is not used)"
    w = f"“{obs.span.text}”" if obs.span else "the answer"
    reason = (
        f"{NOT_CALIBRATED}{other}: the context moved {w} by per-token KL {_num(obs.kl)} nats and raised "
        f"its log-probability by {_num(obs.llr)} nats, but what those numbers mean for {result.model} is not known "
        f"until it is calibrated ({calibrate_command(result.model, str((result.model_info or {}).get('source', '')))}, "
        "or “Calibrate this model” in the app)."
    )
    span = None if obs.span is None else {**obs.to_dict()}
    return Headline(UNCALIBRATED, None, reason, rel, sup, "none", None, span)


def headline(result: DualPathResult, calibration: AxesCalibration | ModelCalibration | None = None) -> Headline:
    """The two-axis headline of ``result`` (no model call), decided under an axes calibration: ``calibration``
    itself, the axes of a calibration record (:class:`~core.engine.calibration_record.ModelCalibration`, what the
    engine hands in while scoring), or by default the record that decided the result
    (:func:`~core.engine.calibration_record.record_of_result`). A calibration made for another model, or a record
    without axes, gives :func:`uncalibrated`."""
    if calibration is None or isinstance(calibration, ModelCalibration):
        record = calibration if calibration is not None else record_of_result(result)
        cal = record.axes
    else:
        cal = calibration
    if cal is None or cal.model != result.model:
        return uncalibrated(result, cal)
    obs = observe(result, cal.span_level)
    rel, sup = reliance_axis(obs, cal), support_axis(obs, cal)
    if obs.span is None:
        reason = (
            "No content word to judge: the answer holds only the question's own words and function words, so "
            "there is no answer span to read the two paths at."
        )
        return Headline(INCONCLUSIVE, None, reason, rel, sup, cal.source, None, obs.to_dict())
    generated = result.parametric.finish != "not generated" and bool(result.parametric.answer)
    special = unanswered(obs.span, parametric_generated=generated, parametric_unsupported=sup.state == UNSUPPORTED,
                         lp_parametric=obs.lp_parametric)  # fmt: skip
    if special is not None:
        return Headline(special[0], None, special[2], rel, sup, cal.source, None, obs.to_dict(), special[1])
    verdict, qualifier, reason = decide_headline(obs, rel, sup)
    reason += said_conflicts(obs.span)
    joint = None
    agreeing = cal.agreement is not None and obs.in_context and obs.in_parametric and rel.state != NEEDED
    feats = feature_values(obs, cal.agreement.features) if agreeing and cal.agreement is not None else None
    if feats is not None and cal.agreement is not None:
        verdict, qualifier, reason, joint = resolve_agreement(cal.agreement, feats, obs, rel)
        reason += said_conflicts(obs.span)
        return Headline(verdict, qualifier, reason, rel, sup, cal.source, joint, obs.to_dict())
    feats = feature_values(obs, cal.joint.features) if verdict == INCONCLUSIVE and cal.joint is not None else None
    if feats is not None and cal.joint is not None:
        verdict, qualifier, reason, joint = resolve_jointly(cal.joint, feats, obs, reason)
    return Headline(verdict, qualifier, reason, rel, sup, cal.source, joint, obs.to_dict())


def resolve_agreement(
    model: JointModel, feats: dict[str, float], obs: Observations, reliance: Axis
) -> tuple[str, str | None, str, dict[str, Any]]:
    """The agreement resolver's ``(verdict, qualifier, reason, joint)`` for a run whose span is in the context and
    in the no-context answer (context and memory agree, so no text can tell which the answer came from) and whose
    axis 1 is not *needed*: *Read* above its band, *Recalled* below it, *Inconclusive* inside it. Its P(read) was
    fitted on such rows labeled by the swap test (does the answer follow the context when the span is swapped?)."""
    p = model.probability(feats)
    low, high = model.band
    joint = {"resolver": "agreement", "score": p, "threshold": model.threshold, "band": [low, high]}
    joint["decided"] = not low <= p <= high
    w = f"“{obs.span.text}”" if obs.span else "the answer"
    state = {NOT_NEEDED: "barely moved", MIXED: "moved"}.get(reliance.state, "moved")
    reason = (
        f"The context and the model's memory agree on {w} (the no-context answer says it too), so the text cannot "
        f"tell which it came from; the context {state} it (per-token KL {_num(obs.kl)} nats, log-probability change "
        f"{_num(obs.llr)} nats, entropy without the context {_num(obs.entropy_parametric)} nats). "
    )
    if model.prior is not None:
        followed, n = model.prior
        reason += (
            f"Where context and memory agreed, this model followed a swapped context on {followed} of {n} "
            "calibration runs (too few kept their own answer to learn from these observations, so this is its "
            f"habit, not a reading of this run): P(the answer follows the context) = {p:.2f}, "
        )
    else:
        reason += "Fitted on swap tests of such runs, these observations give "
        reason += f"P(the answer follows the context) = {p:.2f}, "
    if p > high:
        return READ, ALSO_KNOWN, reason + f"above the band [{low:.2f}, {high:.2f}].", joint
    if p < low:
        return RECALLED, AGREES, reason + f"below the band [{low:.2f}, {high:.2f}].", joint
    return INCONCLUSIVE, None, reason + f"inside the band [{low:.2f}, {high:.2f}].", joint


def resolve_jointly(
    model: JointModel, feats: dict[str, float], obs: Observations, reason: str
) -> tuple[str, str | None, str, dict[str, Any]]:
    """The joint resolver's ``(verdict, qualifier, reason, joint)`` for a run the table left *Inconclusive*:
    *Read* above its band, *Recalled* below it, still *Inconclusive* inside it."""
    p = model.probability(feats)
    low, high = model.band
    joint = {"score": p, "threshold": model.threshold, "band": [low, high], "decided": not low <= p <= high}
    where = "above" if p > high else "below" if p < low else "inside"
    why = f"{reason.rstrip('.')}; taken together, both axes' observations give P(read) = {p:.2f}, {where} the joint "
    why += f"band [{low:.2f}, {high:.2f}]."
    if p > high:
        return READ, OVERRODE if obs.in_parametric is False else None, why, joint
    if p < low:
        return RECALLED, AGREES if obs.in_context else None, why, joint
    return INCONCLUSIVE, None, why, joint


def with_headline(result: DualPathResult, calibration: AxesCalibration | None = None) -> DualPathResult:
    """``result`` with its headline (``axes``; the JSON's ``verdict``, RePCS' own in ``repcs_verdict``): itself when
    it has one and no other ``calibration`` is asked for (decided once per result), else a copy decided under it."""
    if calibration is None and result.axes is not None:
        return result
    copy = replace(result)
    copy.attach_headline(headline(result, calibration) if calibration is not None else result.head)
    return copy
