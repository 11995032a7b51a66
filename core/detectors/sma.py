"""The SMA detector: mean |ADS| over the query units (SMA eqs. 14–20, RAG on vs off)."""

from __future__ import annotations

from core.detectors import keys
from core.detectors.registry import GROUNDED_HIGH, SOURCE_ATTRIBUTION, DetectorInput, declare
from core.methods.sma import DETECTOR_NAME, SMASettings, run_sma


def score(inp: DetectorInput) -> float:
    """SMA's membership score for the row (higher ⇒ the context mattered more)."""
    settings = inp.cache.get(keys.SMA_SETTINGS) or SMASettings(
        max_new_tokens=min(32, int(inp.settings.max_new_tokens)), template=inp.settings.template
    )
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


declare(
    {
        "name": DETECTOR_NAME,
        "label": "SMA mean |ADS| over query units",
        "higher_means": GROUNDED_HIGH,
        "score": score,
        "cost": "heavy",
        "group": SOURCE_ATTRIBUTION,
        "source": "SMA eqs. 14–20 (Lime + ridge, N = 64 masks, word units, RAG on vs off)",
    }
)
