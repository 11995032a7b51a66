"""The Source attribution (SMA) page's controls: the run settings form and the label thresholds.

Both are tables of persistent controls (:mod:`components.controls`): each field of
:class:`core.methods.sma.SMASettings` (or of :class:`LabelThresholds`) maps to the widget that sets it. The
settings' labels, help, bounds and defaults are each field's one definition
(:func:`core.methods.sma.settings.sma_setting_specs`); public mode only lowers a maximum.
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
from core.methods.sma.settings import sma_setting_specs
from core.public import current_policy

_DEFAULTS = SMASettings()
_SPECS = sma_setting_specs()
"""Every SMA setting's one definition (label, help, bounds, step): the form below reads them, adds no bound."""
SCOPE_LABELS = {"query": "the query only (the paper)", "query+context": "the query and the context"}
PERTURBATION_LABELS = {"unicode": "altered: letters → Unicode look-alikes (the paper)", "remove": "removed"}
REFERENCE_LABELS = {"answer": "the unperturbed answer ŷ (§IV-E)", "input": "the perturbed input x̃ (eq. 14 as printed)"}
FIRST_TIER_LABELS = {"off": "β with RAG off (the model alone)", "on": "β with RAG on"}


def _bounds(name: str) -> tuple[Any, Any, Any]:
    """``(low, high, step)`` of an SMA setting, from its one definition."""
    spec = _SPECS[name]
    return spec.low, spec.high, spec.step


def _capped(name: str, key: str, cap: str) -> Any:
    """A whole-number input of the setting ``name`` over its bounds, the maximum lowered to the deployment's cap
    ``cap`` (:func:`core.public.current_policy`); the default is lowered to the cap when it is over it."""
    spec = _SPECS[name]
    most = current_policy().limit(cap, int(spec.high))  # type: ignore[arg-type]
    default = getattr(_DEFAULTS, name)
    return number(spec.label, key, min(default, most), (int(spec.low), most, int(spec.step)), help=spec.help)  # type: ignore[arg-type]


def _number(name: str, key: str, **kwargs: Any) -> Any:
    """A number input of the setting ``name`` over its bounds, with its default and words."""
    spec = _SPECS[name]
    return number(spec.label, key, getattr(_DEFAULTS, name), _bounds(name), help=spec.help, **kwargs)


def _choice(name: str, widget: Callable[..., Any], key: str, labels: Any, **kwargs: Any) -> Any:
    """A choice of the setting ``name``: its options (shown by ``labels``), default and words."""
    spec = _SPECS[name]
    return choice(widget, spec.label, key, labels, getattr(_DEFAULTS, name), help=spec.help, **kwargs)


SETTINGS_FORM: Form = (
    {
        "n_samples": partial(_capped, "n_samples", keys.SMA_N_SAMPLES, "sma_masks"),
        "granularity": partial(_choice, "granularity", st.radio, keys.SMA_GRANULARITY, GRANULARITIES, horizontal=True),
        "scope": partial(_choice, "scope", st.radio, keys.SMA_SCOPE, SCOPE_LABELS),
    },
    {
        "method": partial(_choice, "method", st.selectbox, keys.SMA_METHOD, METHOD_LABELS),
        "perturbation": partial(_choice, "perturbation", st.selectbox, keys.SMA_PERTURBATION, PERTURBATION_LABELS),
        "reference": partial(_choice, "reference", st.selectbox, keys.SMA_REFERENCE, REFERENCE_LABELS),
        "max_new_tokens": partial(_capped, "max_new_tokens", keys.SMA_MAX_NEW_TOKENS, "max_new_tokens"),
    },
    {
        "gamma_length": partial(_number, "gamma_length", keys.SMA_GAMMA_LENGTH),
        "gamma_similarity": partial(_number, "gamma_similarity", keys.SMA_GAMMA_SIMILARITY),
        "alpha": partial(_number, "alpha", keys.SMA_ALPHA, format="%.3f"),
        "fit_intercept": partial(
            state.persistent,
            st.checkbox,
            _SPECS["fit_intercept"].label,
            keys.SMA_FIT_INTERCEPT,
            _DEFAULTS.fit_intercept,
            help=_SPECS["fit_intercept"].help,
        ),
        "seed": partial(_number, "seed", keys.SMA_SEED),
    },
)
"""Three columns of ``{SMASettings field: its control}``; labels, help, bounds and defaults are the fields' own."""


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
