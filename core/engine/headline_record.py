"""The headline as a record: its two axes (:class:`Axis`) and the verdict with its words (:class:`Headline`), and
the words and states they are written with. Deciding it is :mod:`core.engine.axes`'; a swap test carrying it where
context and memory agree is :mod:`core.engine.swap_verdict`'."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from core.engine.verdict import UNCALIBRATED, display

RELIANCE = "context_reliance"
SUPPORT = "parametric_support"
NEEDED, NOT_NEEDED, MIXED = "needed", "not needed", "mixed"
SUPPORTED, UNSUPPORTED = "supported", "unsupported"
OVERRODE = "and it overrode what the model says without it"
ALSO_KNOWN = "which the model also says without it"
AGREES = "the context agrees"
BY_SCORE, BY_TEXT = "score", "text"

RELIANCE_DIRECTION = "higher = the answer needed the context (probability that the model read it)"
SUPPORT_DIRECTION = "higher = the model gives this answer without the context (log-probability of the span, nats)"
HOW_TO_CALIBRATE = "python -m core calibrate-model --model <this model>"
NOT_CALIBRATED = "Not calibrated for this model"
"""The headline's title for a model without its own axes calibration (no verdict is borrowed)."""


@dataclass(frozen=True)
class Axis:
    """One axis of the headline for one run.

    Attributes:
        name: :data:`RELIANCE` or :data:`SUPPORT`.
        state: ``needed`` / ``not needed`` / ``mixed`` (axis 1); ``supported`` / ``unsupported`` / ``mixed``
            (axis 2).
        score: P(read) (axis 1) or the span's parametric log-probability in nats (axis 2); ``None`` when not
            computable.
        threshold, band: the calibrated cut and the inconclusive band ``[low, high]``.
        direction: what a higher score means.
        evidence: the observations behind the score.
        decided_by: ``"score"`` (the score against the threshold and band) or ``"text"`` (axis 2: the no-context
            answer contains the span word, whatever the log-probability).
    """

    name: str
    state: str
    score: float | None
    threshold: float | None
    band: tuple[float, float] | None
    direction: str
    evidence: dict[str, Any]
    decided_by: str = BY_SCORE

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["band"] = None if self.band is None else [float(v) for v in self.band]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Axis:
        """An axis from its JSON form (:meth:`to_dict`)."""
        band = data.get("band")
        return cls(
            name=str(data.get("name", "")),
            state=str(data.get("state", MIXED)),
            score=data.get("score"),
            threshold=data.get("threshold"),
            band=None if band is None else (float(band[0]), float(band[1])),
            direction=str(data.get("direction", "")),
            evidence=dict(data.get("evidence") or {}),
            decided_by=str(data.get("decided_by", BY_SCORE)),
        )


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
    """Where a resolver decided: the joint resolver where the decision table said *Inconclusive*, or the agreement
    resolver (``"resolver": "agreement"``) where context and memory agree on the span — its ``score`` (P(read)),
    ``threshold``, ``band`` and whether it ``decided``; ``None`` otherwise."""
    span: dict[str, Any] | None = None
    """The located answer span (:meth:`core.engine.span.AnswerSpan.to_dict`) and its observations."""
    title_words: str | None = None
    """The whole title where the span cannot be judged as read or recalled (:func:`core.engine.span.unanswered`:
    "Neither: the answer names “Elio Vance”, found in neither …", "Inconclusive: the answer names no author")."""
    internals: dict[str, Any] | None = None
    """Where a swap test carried the verdict (:func:`core.engine.swap_verdict.carry`): what the internals alone
    said — ``verdict``, ``title``, ``reason`` — kept beside the carried verdict; ``None`` when the internals decided
    the headline themselves."""

    @property
    def title(self) -> str:
        """E.g. "Read from the context, and it overrode what the model says without it"."""
        if self.title_words:
            return self.title_words
        words = NOT_CALIBRATED if self.verdict == UNCALIBRATED else display(self.verdict)
        return f"{words}, {self.qualifier}" if self.qualifier else words

    def to_dict(self) -> dict[str, Any]:
        """The ``axes`` object of ``run --json``."""
        return {
            "verdict": self.verdict,
            "qualifier": self.qualifier,
            "title": self.title,
            "reason": self.reason,
            "calibration": self.calibration,
            "span": self.span,
            RELIANCE: self.reliance.to_dict(),
            SUPPORT: self.support.to_dict(),
            "joint": self.joint,
            "title_words": self.title_words,
            "internals": self.internals,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Headline:
        """The headline a result's stored ``axes`` hold (:meth:`to_dict`), rebuilt without deciding it again."""
        return cls(
            verdict=str(data["verdict"]),
            qualifier=data.get("qualifier"),
            reason=str(data.get("reason", "")),
            reliance=Axis.from_dict(data.get(RELIANCE) or {"name": RELIANCE}),
            support=Axis.from_dict(data.get(SUPPORT) or {"name": SUPPORT}),
            calibration=str(data.get("calibration", "")),
            joint=data.get("joint"),
            span=data.get("span"),
            title_words=data.get("title_words"),
            internals=data.get("internals"),
        )
