"""The headline verdict on two axes, computed from what one dual-path run already holds (issue 23).

Use: ``headline(result)`` → :class:`Headline` (``.verdict``, ``.title``, ``.reason``, ``.reliance``,
``.support``; ``.to_dict()`` is the ``axes`` object of ``run --json``). No model call.

* **Axis 1, context reliance** — did the answer need the context? A logistic regression on free KL features of
  the run (ln of the largest per-token KL, ln of the mean KL, ln L, over the answer's first
  :data:`RELIANCE_WINDOW` tokens), fitted on the
  behavior-labeled calibration rows (``scripts/calibrate_axes.py``; coefficients in JSON, no pickle). Its
  score is the probability that the answer was *read*; ``≥`` the upper edge of the band ⇒ *needed*, ``≤`` the
  lower edge ⇒ *not needed*, inside ⇒ *mixed*.
* **Axis 2, parametric support** — would the model give this answer without the context? Two observations of
  the parametric path: whether its own greedy answer contains the retrieval answer's first content word
  (normalized text match), and the teacher-forced log-probability (nats, mean over at most
  :data:`CONTENT_TOKENS` tokens) it gives that word. A match ⇒ *supported*; else the log-probability against
  its calibrated threshold and band ⇒ *supported* / *unsupported* / *mixed*.
* **The headline** (:func:`decide_headline`): *Read from the context* (needed; "and it overrode what the model
  says without it" when the parametric answer differs) · *Recalled from memory* (not needed and supported;
  "the context agrees" when the answer's word is also in the context) · *Neither* (not needed, unsupported: a
  guess) · *Inconclusive* (mixed evidence, with the reason). The decision table is in ``docs/dual-path.md``.

RePCS' own Z-vs-τ(L) verdict stays on the result (``result.verdict``) and in the agreement view as a detector.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from core.engine.axes_calibration import AxesCalibration, JointModel, bundled_axes
from core.engine.verdict import INCONCLUSIVE, NEITHER, READ, RECALLED, UNCALIBRATED, display

if TYPE_CHECKING:
    from core.engine.result import DualPathResult


CONTENT_TOKENS = 3
"""At most this many tokens of the first content word enter the parametric support score."""
RELIANCE_WINDOW = 16
"""Axis 1 looks at the first this many scored answer tokens (where the answer's content is; the behavior labels
were read from answers of this length, and a long answer's rambling tail says nothing about its content)."""
KL_FLOOR = 1e-6
"""Added to KL values before the logarithm (a KL of exactly 0 would give −∞)."""

RELIANCE = "context_reliance"
SUPPORT = "parametric_support"
NEEDED, NOT_NEEDED, MIXED = "needed", "not needed", "mixed"
SUPPORTED, UNSUPPORTED = "supported", "unsupported"
OVERRODE = "and it overrode what the model says without it"
AGREES = "the context agrees"

RELIANCE_DIRECTION = "higher = the answer needed the context (probability that the model read it)"
SUPPORT_DIRECTION = "higher = the model gives this answer without the context (log-probability, nats)"

_STOP_TEXT = """a an the is are was were be been being am of in on at to for from by with as and or but not no nor
    it its
    this that these those there here he she they them his her their him we you i me my our your which who whom
    whose what when where why how do does did done has have had having will would shall should can could may
    might must also than then so such very just only about into onto over under after before between during
    s t called named known one some any all most more much many yes answer answers question questions based
    according context text following given located situated belongs belong owned developed written spoken made
    born founded created produced released affiliated associated headquartered"""
STOPWORDS = frozenset(_STOP_TEXT.split())
"""Words never taken as an answer's content word (function words and answer boilerplate)."""


def normalize(text: str) -> str:
    """Case-folded text without accents, every run of non-alphanumerics one space (for text matches)."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()
    return " ".join(re.findall(r"[^\W_]+", plain))


def _contains(haystack: str, word: str) -> bool:
    return bool(word) and f" {word} " in f" {normalize(haystack)} "


@dataclass(frozen=True)
class ContentSpan:
    """The retrieval answer's first content word: its normalized text and the answer positions it covers."""

    word: str
    positions: tuple[int, ...]
    text: str = ""


def _stem(word: str) -> str:
    return word[: max(4, len(word) - 2)]


def _from_query(word: str, query_words: set[str]) -> bool:
    """``word`` is a word of the query or shares its stem with one ("owned" / "owns", "origin" / "originate")."""
    return word in query_words or any(
        len(q) >= 4 and len(word) >= 4 and (word.startswith(_stem(q)) or q.startswith(_stem(word))) for q in query_words
    )


def first_content(tokens: list[str], query: str) -> ContentSpan | None:
    """The first word of the answer (its tokens concatenated) that is neither a stop word nor a word of the
    query (nor shares its stem with one), with the token positions that overlap it (at most
    :data:`CONTENT_TOKENS`); ``None`` when there is none."""
    text = "".join(tokens)
    query_words = set(normalize(query).split()) - STOPWORDS
    for match in re.finditer(r"[^\W_]+", text):
        word = normalize(match.group())
        if not word or word in STOPWORDS or _from_query(word, query_words):
            continue
        start, end, offset, positions = match.start(), match.end(), 0, []
        for i, tok in enumerate(tokens):
            if offset < end and offset + len(tok) > start:
                positions.append(i)
            offset += len(tok)
        return ContentSpan(word, tuple(positions[:CONTENT_TOKENS]), match.group())
    return None


def reliance_features(result: DualPathResult) -> dict[str, float] | None:
    """Axis 1's features from the run's per-token KL over the first :data:`RELIANCE_WINDOW` scored tokens
    (``None`` for an empty answer)."""
    L = min(int(result.score_window), result.n_tokens, RELIANCE_WINDOW)
    if L < 1:
        return None
    kl = np.asarray(result.token_kl[:L], dtype=np.float64)
    return {
        "ln_max_kl": math.log(float(kl.max()) + KL_FLOOR),
        "ln_mean_kl": math.log(float(kl.mean()) + KL_FLOOR),
        "ln_L": math.log(L),
    }


def support_features(result: DualPathResult) -> dict[str, Any]:
    """Axis 2's observations: the content word, the parametric path's mean log-probability of its first
    :data:`CONTENT_TOKENS` tokens (teacher-forced, nats), whether the parametric answer contains it (``None``
    when it was not generated), and whether the context contains it."""
    span = first_content(list(result.retrieval.tokens), result.query)
    generated = result.parametric.finish != "not generated" and bool(result.parametric.answer)
    if span is None or not span.positions:
        return {"word": None, "text": None, "logprob": None, "in_parametric": None, "in_context": None}
    lp = np.asarray(result.parametric.logprob, dtype=np.float32)[list(span.positions)]
    return {
        "word": span.word,
        "text": span.text,
        "positions": list(span.positions),
        "logprob": float(np.mean(lp.astype(np.float64))),
        "in_parametric": _contains(result.parametric.answer, span.word) if generated else None,
        "in_context": _contains(result.context, span.word),
    }


def joint_features(result: DualPathResult) -> dict[str, float] | None:
    """The joint resolver's features of ``result`` (``None`` without an answer or a content word)."""
    feats, obs = reliance_features(result), support_features(result)
    if feats is None or obs["logprob"] is None:
        return None
    return {
        **feats,
        "support_logprob": float(obs["logprob"]),
        "in_parametric": float(obs["in_parametric"] is True),
        "not_in_parametric": float(obs["in_parametric"] is False),
        "in_context": float(bool(obs["in_context"])),
    }


@dataclass(frozen=True)
class Axis:
    """One axis of the headline for one run.

    Attributes:
        name: :data:`RELIANCE` or :data:`SUPPORT`.
        state: ``needed`` / ``not needed`` / ``mixed`` (axis 1); ``supported`` / ``unsupported`` / ``mixed``
            (axis 2).
        score: P(read) (axis 1) or the parametric log-probability in nats (axis 2); ``None`` when not computable.
        threshold, band: the calibrated cut and the inconclusive band ``[low, high]``.
        direction: what a higher score means.
        evidence: the features behind the score.
    """

    name: str
    state: str
    score: float | None
    threshold: float | None
    band: tuple[float, float] | None
    direction: str
    evidence: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["band"] = None if self.band is None else [float(v) for v in self.band]
        return out


@dataclass(frozen=True)
class Headline:
    """The two-axis headline of one run: the verdict, its qualifier, the words a page shows and why."""

    verdict: str
    qualifier: str | None
    reason: str
    reliance: Axis
    support: Axis
    calibration: str
    joint: dict[str, Any] | None = None
    """Where the decision table said *Inconclusive* and a joint resolver exists: its ``score`` (P(read)),
    ``threshold``, ``band`` and whether it ``decided``; ``None`` otherwise."""

    @property
    def title(self) -> str:
        """E.g. "Read from the context, and it overrode what the model says without it"."""
        words = display(self.verdict)
        return f"{words}, {self.qualifier}" if self.qualifier else words

    def to_dict(self) -> dict[str, Any]:
        """The ``axes`` object of ``run --json``."""
        return {
            "verdict": self.verdict,
            "qualifier": self.qualifier,
            "title": self.title,
            "reason": self.reason,
            "calibration": self.calibration,
            RELIANCE: self.reliance.to_dict(),
            SUPPORT: self.support.to_dict(),
            "joint": self.joint,
        }


def _state(score: float | None, cut: float, band: tuple[float, float], high: str, low: str) -> str:
    """``high`` / ``low`` by the side of ``cut``; :data:`MIXED` inside a band of non-zero width (or no score)."""
    if score is None or (band[0] < band[1] and band[0] <= score <= band[1]):
        return MIXED
    return high if score >= cut else low


def reliance_axis(result: DualPathResult, cal: AxesCalibration) -> Axis:
    """Axis 1 of ``result`` under ``cal``."""
    feats = reliance_features(result)
    score = None if feats is None else cal.reliance(feats)
    band = (float(cal.reliance_band[0]), float(cal.reliance_band[1]))
    return Axis(
        RELIANCE,
        _state(score, cal.reliance_threshold, band, NEEDED, NOT_NEEDED),
        score,
        cal.reliance_threshold,
        band,
        RELIANCE_DIRECTION,
        {k: round(v, 6) for k, v in (feats or {}).items()},
    )


def support_axis(result: DualPathResult, cal: AxesCalibration) -> Axis:
    """Axis 2 of ``result`` under ``cal``: a parametric answer containing the word ⇒ supported, else the
    log-probability against the threshold and band."""
    obs = support_features(result)
    band = (float(cal.support_band[0]), float(cal.support_band[1]))
    if obs["in_parametric"]:
        state = SUPPORTED
    else:
        state = _state(obs["logprob"], cal.support_threshold, band, SUPPORTED, UNSUPPORTED)
    return Axis(
        SUPPORT,
        state,
        obs["logprob"],
        cal.support_threshold,
        band,
        SUPPORT_DIRECTION,
        obs,
    )


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def decide_headline(reliance: Axis, support: Axis) -> tuple[str, str | None, str]:
    """The decision table: ``(verdict, qualifier, reason)`` from the two axes (their states and evidence).

    =============  ========================================  ====================  =========================
    reliance       supported                                 mixed                 unsupported
    =============  ========================================  ====================  =========================
    needed         read if the word is in the context, else  read                  read, "overrode"
                   recalled (only the wording changed)
    mixed          recalled if the word is not in the        inconclusive          read if the word is in the
                   context, else inconclusive                                      context, else inconclusive
    not needed     recalled (+ "the context agrees")         inconclusive          neither
    =============  ========================================  ====================  =========================
    """
    ev = support.evidence
    word, in_ctx, in_para = ev.get("word"), ev.get("in_context"), ev.get("in_parametric")
    r, s = reliance.state, support.state
    p = "—" if reliance.score is None else f"{reliance.score:.2f}"
    lp = "—" if support.score is None else f"{support.score:.2f}"
    w = f"“{ev.get('text') or word}”" if word else "the answer"
    kl = reliance.evidence.get("ln_max_kl")
    max_kl = "—" if kl is None else f"{math.exp(kl):.2f}"
    needed = f"the context moved the answer strongly (largest per-token KL {max_kl} nats; P(read) = {p})"
    not_needed = f"the context barely moved the answer (largest per-token KL {max_kl} nats; P(read) = {p})"
    mixed = f"the context's effect is in between (largest per-token KL {max_kl} nats; P(read) = {p} is in the band)"
    para = (
        f"without the context the model says {w} too"
        if in_para
        else f"without the context the model gives {w} log-probability {lp} nats"
        + ("" if in_para is None else " and answers otherwise")
    )
    if r == NEEDED:
        if s == SUPPORTED and not in_ctx:
            return RECALLED, None, f"Only the wording changed: {needed}, but {w} is not in the context and {para}."
        qualifier = OVERRODE if s == UNSUPPORTED or in_para is False else None
        return READ, qualifier, f"{_cap(needed)}; {para}."
    if r == NOT_NEEDED:
        if s == SUPPORTED:
            return RECALLED, AGREES if in_ctx else None, f"{_cap(not_needed)}; {para}."
        if s == UNSUPPORTED:
            return NEITHER, None, f"{_cap(not_needed)}, yet {para}: a guess."
        return INCONCLUSIVE, None, f"{_cap(not_needed)}, but whether the model knows {w} is unclear ({para})."
    if s == SUPPORTED and not in_ctx:
        return RECALLED, None, f"{_cap(mixed)}; {w} is not in the context and {para}."
    if s == UNSUPPORTED and in_ctx:
        return READ, OVERRODE if in_para is False else None, f"{_cap(mixed)}; {w} is in the context and {para}."
    return INCONCLUSIVE, None, f"Mixed evidence: {mixed}, and {para}" + (f"; {w} is in the context." if in_ctx else ".")


def headline(result: DualPathResult, calibration: AxesCalibration | None = None) -> Headline:
    """The two-axis headline of ``result`` (no model call). ``calibration`` defaults to the bundled one; a model
    other than the embedded one is judged with it and says so; without any → ``"uncalibrated"``."""
    cal = calibration if calibration is not None else bundled_axes()
    if cal is None:
        rel = Axis(RELIANCE, MIXED, None, None, None, RELIANCE_DIRECTION, {})
        sup = Axis(SUPPORT, MIXED, None, None, None, SUPPORT_DIRECTION, {})
        return Headline(UNCALIBRATED, None, "No axes calibration is available for this model.", rel, sup, "none")
    source = cal.source
    if cal.model != result.model:
        source = f"{cal.model}'s axes calibration ({cal.source}), not calibrated for this model"
    rel, sup = reliance_axis(result, cal), support_axis(result, cal)
    verdict, qualifier, reason = decide_headline(rel, sup)
    joint = None
    feats = joint_features(result) if verdict == INCONCLUSIVE and cal.joint is not None else None
    if feats is not None:
        verdict, qualifier, reason, joint = resolve_jointly(cal.joint, feats, sup, reason)
    return Headline(verdict, qualifier, reason, rel, sup, source, joint)


def resolve_jointly(
    model: JointModel, feats: dict[str, float], support: Axis, reason: str
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
        return READ, OVERRODE if support.evidence.get("in_parametric") is False else None, why, joint
    if p < low:
        return RECALLED, AGREES if support.evidence.get("in_context") else None, why, joint
    return INCONCLUSIVE, None, why, joint


def with_headline(result: DualPathResult, calibration: AxesCalibration | None = None) -> DualPathResult:
    """``result`` with :attr:`~core.engine.result.DualPathResult.axes` set to its :func:`headline` (a copy; in
    its JSON the headline becomes the top-level ``verdict`` and RePCS' own moves to ``repcs_verdict``)."""
    return replace(result, axes=headline(result, calibration).to_dict())
