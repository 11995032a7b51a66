"""The Source attribution (SMA) page's controls: the run settings form and the label thresholds.

Both are tables of persistent controls (:mod:`components.controls`): each field of
:class:`core.methods.sma.SMASettings` (or of :class:`LabelThresholds`) maps to the widget that sets it, and
the defaults are the dataclasses' own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import streamlit as st

from components import keys, state
from components.controls import Form, choice, draw_form, number, settings_from
from core.methods.sma import DEFAULT_TAU, DEFAULT_TAU1, DEFAULT_TAU2, GRANULARITIES, METHOD_LABELS, SMASettings
from core.public import current_policy

_DEFAULTS = SMASettings()
SCOPE_LABELS = {"query": "the query only (the paper)", "query+context": "the query and the context"}
PERTURBATION_LABELS = {"unicode": "altered: letters → Unicode look-alikes (the paper)", "remove": "removed"}
REFERENCE_LABELS = {"answer": "the unperturbed answer ŷ (§IV-E)", "input": "the perturbed input x̃ (eq. 14 as printed)"}
FIRST_TIER_LABELS = {"off": "β with RAG off (the model alone)", "on": "β with RAG on"}


def _capped(label: str, key: str, default: int, limit: tuple[str, int, int], *, help: str) -> Any:
    """A whole-number input from 1 to the deployment's cap (``limit`` = policy name, cap, step); the default is
    lowered to the cap when it is over it (:func:`core.public.current_policy`)."""
    name, cap, step = limit
    most = current_policy().limit(name, cap)
    return number(label, key, min(default, most), (1, most, step), help=help)


SETTINGS_FORM: Form = (
    {
        "n_samples": partial(
            _capped,
            "N — random masks (Shapley: permutations)",
            keys.SMA_N_SAMPLES,
            _DEFAULTS.n_samples,
            ("sma_masks", 1024, 8),
            help="The paper finds accuracy stable from about 60–80 perturbations.",
        ),
        "granularity": partial(
            choice,
            st.radio,
            "Units",
            keys.SMA_GRANULARITY,
            GRANULARITIES,
            _DEFAULTS.granularity,
            horizontal=True,
            help="token: the model's own tokens; word: whitespace-separated (the paper); sentence: for long inputs.",
        ),
        "scope": partial(
            choice,
            st.radio,
            "Perturb",
            keys.SMA_SCOPE,
            SCOPE_LABELS,
            _DEFAULTS.scope,
            help="In the paper the auditor perturbs the user input; retrieval appends its passages intact. "
            "Perturbing the context too gives its units a β with RAG on (their β_off is 0: the RAG-off prompt "
            "does not contain them).",
        ),
    },
    {
        "method": partial(
            choice, st.selectbox, "Attribution method (captum)", keys.SMA_METHOD, METHOD_LABELS, _DEFAULTS.method
        ),
        "perturbation": partial(
            choice, st.selectbox, "A masked unit is", keys.SMA_PERTURBATION, PERTURBATION_LABELS, _DEFAULTS.perturbation
        ),
        "reference": partial(
            choice,
            st.selectbox,
            "Response score compares the new answer with",
            keys.SMA_REFERENCE,
            REFERENCE_LABELS,
            _DEFAULTS.reference,
        ),
        "max_new_tokens": partial(
            _capped,
            "Max new tokens per answer",
            keys.SMA_MAX_NEW_TOKENS,
            _DEFAULTS.max_new_tokens,
            ("max_new_tokens", 256, 4),
            help="Every perturbed input is answered again: keep this short.",
        ),
    },
    {
        "gamma_length": partial(
            number, "γ₁ (length ratio)", keys.SMA_GAMMA_LENGTH, _DEFAULTS.gamma_length, (0.0, 10.0, 0.1)
        ),
        "gamma_similarity": partial(
            number, "γ₂ (semantic similarity)", keys.SMA_GAMMA_SIMILARITY, _DEFAULTS.gamma_similarity, (0.0, 10.0, 0.1)
        ),
        "alpha": partial(number, "Ridge α", keys.SMA_ALPHA, _DEFAULTS.alpha, (0.001, 1000.0, 0.5), format="%.3f"),
        "fit_intercept": partial(
            state.persistent,
            st.checkbox,
            "Fit an intercept",
            keys.SMA_FIT_INTERCEPT,
            _DEFAULTS.fit_intercept,
            help="Eq. 16 as printed has none; without one every β also carries a share of the mean response.",
        ),
        "seed": partial(number, "Seed", keys.SMA_SEED, _DEFAULTS.seed, (0, 2**31 - 1, 1)),
    },
)
"""Three columns of ``{SMASettings field: its control}``."""


@dataclass(frozen=True)
class LabelThresholds:
    """The thresholds of SMA's three-way label (eqs. 19, 21; :meth:`core.methods.sma.SMAResult.labels`).

    Attributes:
        tau: β_j ≥ τ → pretrained member (the paper gives no value).
        tau1, tau2: the edges of the non-member band of ADS (the paper: 0.1 and −0.1).
        first_tier: which run's β the first tier tests, ``"off"`` or ``"on"`` (the paper does not say).
    """

    tau: float = DEFAULT_TAU
    tau1: float = DEFAULT_TAU1
    tau2: float = DEFAULT_TAU2
    first_tier: str = "off"

    def to_dict(self) -> dict[str, Any]:
        """``{"tau", "tau1", "tau2", "first_tier"}``: the keyword arguments of ``SMAResult.labels`` (and the
        exported ``thresholds``)."""
        return dataclasses.asdict(self)


_THRESHOLDS = LabelThresholds()


def _threshold(label: str, name: str, default: float, help_text: str) -> Callable[[], Any]:
    """A persistent slider over [−1, 1] for one of the label thresholds (drawn when called)."""
    return partial(number, label, name, default, (-1.0, 1.0, 0.01), widget=st.slider, help=help_text)


THRESHOLDS_FORM: Form = (
    {"tau": _threshold("τ (β ≥ τ → pretrained member)", keys.SMA_TAU, _THRESHOLDS.tau, "The paper gives no value.")},
    {
        "tau1": _threshold(
            "τ₁ (upper edge of the non-member band)", keys.SMA_TAU1, _THRESHOLDS.tau1, "The paper: τ₁ = 0.1."
        )
    },
    {"tau2": _threshold("τ₂ (lower edge)", keys.SMA_TAU2, _THRESHOLDS.tau2, "The paper: τ₂ = −0.1.")},
    {
        "first_tier": partial(
            choice,
            st.radio,
            "β tested against τ",
            keys.SMA_FIRST_TIER,
            FIRST_TIER_LABELS,
            _THRESHOLDS.first_tier,
            help="The paper does not say which run's β the first tier uses.",
        )
    },
)
"""Four columns, one threshold each."""


def draw_settings(template: str) -> SMASettings:
    """The SMA settings form (three columns); ``template`` comes from the sidebar."""
    return settings_from(_DEFAULTS, draw_form(SETTINGS_FORM), template=template)


def draw_thresholds() -> LabelThresholds:
    """The label thresholds τ, τ₁, τ₂ and the first tier's β (four columns)."""
    return settings_from(_THRESHOLDS, draw_form(THRESHOLDS_FORM, gap="small"))
