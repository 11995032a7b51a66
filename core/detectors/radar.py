"""The RADAR detector: the ensemble's recall probability for the row's query alone (RADAR §2.3)."""

from __future__ import annotations

from core.detectors import keys
from core.detectors.registry import MEMORIZED_HIGH, RECALL_VS_REASONING, DetectorInput, declare
from core.detectors.shared import text_pass
from core.methods.radar import FEATURE_VERSION, analyze_prompt, analyze_trace, classifier_for, radar_prompt


def score(inp: DetectorInput) -> float:
    """RADAR's recall probability p̄ for the row's query alone (no context): higher = more recall-like.

    Leaves JSON-ready details under ``inp.cache[keys.RADAR_DETAILS]`` (the analyzed text, its token count, the
    37 features and the prediction with each classifier's vote, RDS and RCI); a second call reuses them.
    """
    text_pass(inp)  # with the context text in one forward, when both are planned
    details = inp.cache.get(keys.RADAR_DETAILS)
    if details is None:
        classifier = classifier_for(inp.handle)
        traced = inp.cache.pop(keys.RADAR_TRACE, None)
        if traced is not None:
            analysis = analyze_trace(inp.handle, traced, classifier)
        else:
            analysis = analyze_prompt(inp.handle, radar_prompt(inp.result.query), classifier)
        details = {
            "text": analysis.text,
            "n_tokens": len(analysis.trace.token_ids),
            "features": dict(analysis.features),
            "prediction": None if analysis.prediction is None else analysis.prediction.to_dict(),
            "feature_version": FEATURE_VERSION,
        }
        inp.cache[keys.RADAR_DETAILS] = details
    return float(details["prediction"]["p_recall"])


declare(
    {
        "name": "radar",
        "label": "RADAR recall probability (query only)",
        "higher_means": MEMORIZED_HIGH,
        "score": score,
        "cost": "forward",
        "group": RECALL_VS_REASONING,
        "source": "RADAR (2025) §2.3 ensemble over the 37 features of appendix D",
    }
)
