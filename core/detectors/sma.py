"""The SMA detector: mean |ADS| over the query units (SMA eqs. 14–20, RAG on vs off).

Its run settings are :class:`~core.methods.sma.SMASettings`' defaults (their one definition), the answers capped at
the run's ``max_new_tokens``; a caller's own settings go in ``inp.cache[keys.SMA_SETTINGS]``.
"""

from __future__ import annotations

import math

from core.detectors import keys
from core.detectors.registry import GROUNDED_HIGH, SOURCE_ATTRIBUTION, Details, DetectorInput, declare
from core.engine import DualPathSettings
from core.engine.cost_meter import Work
from core.engine.estimate import estimate_seconds
from core.methods.sma import DETECTOR_NAME, SMASettings, run_sma
from core.methods.sma.units import split_units
from core.methods.work import sma_planned
from core.model.handle import ModelHandle

DEFAULTS = SMASettings()


def settings_for(inp: DetectorInput) -> SMASettings:
    """The row's SMA settings: the caller's (``keys.SMA_SETTINGS``), else the defaults with answers no longer than
    the run's."""
    return inp.cache.get(keys.SMA_SETTINGS) or SMASettings(
        max_new_tokens=min(DEFAULTS.max_new_tokens, int(inp.settings.max_new_tokens)), template=inp.settings.template
    )


def score(inp: DetectorInput) -> float:
    """SMA's membership score for the row (higher ⇒ the context mattered more)."""
    settings = settings_for(inp)
    run = inp.cache.get(keys.SMA_RUNNER) or run_sma
    result = run(inp.handle, inp.result.query, inp.result.context, settings)
    inp.cache[keys.SMA_DETAILS] = {
        "membership_score": result.membership_score(),
        "label_counts": result.label_counts(),
        "units": [u.to_dict() for u in result.units],
        "beta_on": [float(b) for b in result.beta_on],
        "beta_off": [float(b) for b in result.beta_off],
        "ads": [float(d) for d in result.ads],
        "labels": result.labels(),
        "reference_answer_on": result.on.reference_answer,
        "reference_answer_off": result.off.reference_answer,
        "settings": result.settings,
        "seconds": result.timings.get("total_s"),
    }
    return result.membership_score()


def estimate(handle: ModelHandle, settings: DualPathSettings) -> float | None:
    """SMA generates its N perturbed prompts twice (context on and off) in batches, each answer at most the default
    answer length (the defaults of :class:`~core.methods.sma.SMASettings`)."""
    batches = 2 * math.ceil(DEFAULTS.n_samples / DEFAULTS.batch_size)
    tokens = batches * min(DEFAULTS.max_new_tokens, int(settings.max_new_tokens))
    return estimate_seconds(handle, generated_tokens=tokens, forwards=2, batch_factor=1.5)


def work(inp: DetectorInput) -> Work:
    """Its units of work on the row (:func:`core.methods.work.sma_planned`): its batches of answers to perturbed
    prompts and the prompts they read."""
    settings = settings_for(inp)
    query, context, tok = inp.result.query, inp.result.context, getattr(inp.handle, "tokenizer", None)
    nq = len(split_units(query, settings.granularity, tok)) if query.strip() else 0
    scoped = settings.scope == "query+context" and context.strip()
    nc = len(split_units(context, settings.granularity, tok)) if scoped else 0
    return sma_planned(inp.handle, query, context, settings, nq, nc)


DETAILS = Details(
    keys.SMA_DETAILS,
    {
        "membership_score": "mean |ADS| over the query units (the score)",
        "label_counts": "units per three-way label",
        "units": "the interpretable units (text, kind, position)",
        "beta_on": "β per unit with the context (RAG on)",
        "beta_off": "β per unit without it (RAG off)",
        "ads": "β_on − β_off per unit",
        "labels": "each unit's three-way label",
        "reference_answer_on": "ŷ with the context",
        "reference_answer_off": "ŷ without it",
        "settings": "the SMA settings of the run",
        "seconds": "the run's time (s)",
    },
)

declare(
    {
        "name": DETECTOR_NAME,
        "label": "SMA mean |ADS| over query units",
        "higher_means": GROUNDED_HIGH,
        "score": score,
        "cost": "heavy",
        "group": SOURCE_ATTRIBUTION,
        "source": "SMA eqs. 14–20 (Lime + ridge, N = 64 masks, word units, RAG on vs off)",
        "short": "SMA",
        "estimate": estimate,
        "work": work,
        "details": DETAILS,
        "page": "Source attribution",
    }
)
