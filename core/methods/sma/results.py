"""SMA's results: one scored perturbed sample, one attribution run, both runs with ADS, and the context
ablation. Plain dataclasses of CPU numpy arrays and strings; ``to_dict``/``from_dict`` are lossless JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from core.methods.sma.maths import DEFAULT_TAU, DEFAULT_TAU1, DEFAULT_TAU2, LABELS, classify_units, mean_abs_ads
from core.methods.sma.units import QUERY, Unit

FIRST_TIER = ("off", "on")
"""Which β the first tier (β ≥ τ) tests: retrieval off (default) or on. The paper does not say."""
DETECTOR_NAME = "sma"


@dataclass
class Sample:
    """One perturbed input and its scored answer.

    Attributes:
        mask: the interpretable mask over the run's units as a ``"0"``/``"1"`` string (1 = kept).
        answer: ŷ⁽ⁱ⁾, the greedy answer to the perturbed prompt.
        n_tokens: Len(ŷ⁽ⁱ⁾) in tokens (final EOS excluded).
        length_ratio: Len(ŷ⁽ⁱ⁾) / Len(reference).
        similarity: Sim(ŷ⁽ⁱ⁾, reference), cosine of sentence embeddings.
        score: r⁽ⁱ⁾ of eq. 14.
    """

    mask: str
    answer: str
    n_tokens: int
    length_ratio: float
    similarity: float
    score: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SMARun:
    """One attribution run (retrieval on or off).

    Attributes:
        rag: whether the context was in the prompt.
        prompt: the unperturbed prompt.
        reference_answer: ŷ, the greedy answer to the unperturbed prompt.
        reference_tokens: Len(ŷ) in tokens (final EOS excluded).
        unit_indices: indices into :attr:`SMAResult.units` of this run's features.
        beta: the attribution of each of this run's units, shape ``(L_run,)`` float64.
        intercept: the ridge intercept (only with ``fit_intercept``).
        samples: every perturbed input (as its mask string over this run's units) and its scored answer.
        generations: perturbed answers generated (the unperturbed one not counted).
        seconds: wall time of the run.
    """

    rag: bool
    prompt: str
    reference_answer: str
    reference_tokens: int
    unit_indices: list[int]
    beta: np.ndarray
    intercept: float | None
    samples: list[Sample]
    generations: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return _plain_fields(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SMARun:
        return _from_fields(
            cls,
            {"intercept": None, **data},
            beta=_float64,
            unit_indices=lambda ids: [int(i) for i in ids],
            samples=lambda samples: [Sample(**x) for x in samples],
        )


@dataclass
class SMAResult:
    """Both runs, the per-unit attributions and ADS.

    Attributes:
        units: every unit of the query (then of the context, with ``scope="query+context"``), length L.
        beta_on, beta_off: β per unit with retrieval on / off, shape ``(L,)`` float64; a context unit's β_off
            is 0 (the RAG-off prompt does not contain it).
        ads: Diff(β_j) = β_on − β_off (eq. 20), shape ``(L,)``.
        on, off: the two runs.
        timings: ``on_s``, ``off_s``, ``total_s`` in seconds.
    """

    model: str
    query: str
    context: str
    template: str
    settings: dict[str, Any]
    units: list[Unit]
    beta_on: np.ndarray
    beta_off: np.ndarray
    ads: np.ndarray
    on: SMARun
    off: SMARun
    timings: dict[str, float] = field(default_factory=dict)
    kind: str = "sma"

    @property
    def query_mask(self) -> np.ndarray:
        """``(L,)`` bool: which units belong to the query."""
        return np.array([u.segment == QUERY for u in self.units], dtype=bool)

    def labels(
        self,
        tau: float = DEFAULT_TAU,
        tau1: float = DEFAULT_TAU1,
        tau2: float = DEFAULT_TAU2,
        first_tier: str = "off",
    ) -> list[str]:
        """Three-way labels (:func:`~core.methods.sma.maths.classify_units`); ``first_tier`` picks β_off or
        β_on for the β ≥ τ test."""
        if first_tier not in FIRST_TIER:
            raise ValueError(f"first_tier must be 'off' or 'on', got {first_tier!r}")
        beta = self.beta_off if first_tier == "off" else self.beta_on
        return classify_units(beta, self.ads, tau, tau1, tau2)

    def membership_score(self) -> float:
        """Mean |ADS| over the query units: how much toggling retrieval changes the attribution (higher =
        more retrieval-dependent). The detector score of :data:`DETECTOR_NAME`."""
        return mean_abs_ads(self.ads, self.query_mask)

    def label_counts(self, **kwargs: Any) -> dict[str, int]:
        """How many units carry each of :data:`~core.methods.sma.maths.LABELS` (``kwargs`` as :meth:`labels`)."""
        labels = self.labels(**kwargs)
        return {label: labels.count(label) for label in LABELS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **_plain_fields(self),
            "membership_score": self.membership_score(),
            "labels_default": self.labels(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SMAResult:
        return _from_fields(
            cls,
            data,
            units=lambda units: [Unit(**u) for u in units],
            beta_on=_float64,
            beta_off=_float64,
            ads=_float64,
            on=SMARun.from_dict,
            off=SMARun.from_dict,
        )


@dataclass
class ContextAblation:
    """Each context sentence removed in turn (retrieval on, query intact).

    Scores are agreement with the full-context answer ŷ
    (:func:`core.methods.sma.maths.agreement_score`: γ₁ · min(ρ, 1/ρ) + γ₂ · Sim), not eq. 14's response
    score, whose length term rewards an answer longer than ŷ.

    Attributes:
        sentences: the context's S sentences.
        full_score: agreement of the answer with the whole context with ŷ (γ₁ + γ₂ up to float noise).
        scores: agreement with ŷ of the answer with sentence s removed, shape ``(S,)``.
        delta: full_score − scores ≥ 0, shape ``(S,)``: how far removing s moved the answer away from ŷ
            (higher = the answer leaned on s; 0 = the answer did not change).
        answers: the answer with sentence s removed.
        similarities, length_ratios: the two terms of eq. 14 for each removal, shape ``(S,)``.
    """

    model: str
    query: str
    context: str
    settings: dict[str, Any]
    reference_answer: str
    sentences: list[str]
    full_score: float
    scores: np.ndarray
    delta: np.ndarray
    answers: list[str]
    similarities: np.ndarray
    length_ratios: np.ndarray
    seconds: float
    kind: str = "context_ablation"
    score_kind: str = "agreement"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **_plain_fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextAblation:
        """A context ablation back from its :meth:`to_dict` form (the arrays as float64)."""
        return _from_fields(cls, data, **dict.fromkeys(("scores", "delta", "similarities", "length_ratios"), _float64))


def _plain(value: Any) -> Any:
    """``value`` as JSON: an array as a list, a result as its ``to_dict()``, lists and dicts copied."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return dict(value) if isinstance(value, dict) else value


def _plain_fields(obj: Any) -> dict[str, Any]:
    """Every field of the dataclass ``obj`` by name, in order, as JSON (:func:`_plain`)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}


def _from_fields(cls: type, data: dict[str, Any], **convert: Any) -> Any:
    """``cls`` from the fields of ``data`` it has (other keys, such as derived figures, ignored), each field
    named in ``convert`` passed through its converter."""
    kwargs = {f.name: data[f.name] for f in fields(cls) if f.name in data}
    return cls(**{**kwargs, **{name: fn(kwargs[name]) for name, fn in convert.items() if name in kwargs}})


def _float64(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)
