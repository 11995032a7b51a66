"""The RADAR detector: the ensemble's recall probability for the row's query alone (RADAR §2.3).

RADAR reads the query alone and answers another question than read/recalled — does the query look like a recall or
a reasoning task? — so its reading (:func:`recall_or_reasoning`) gives its own label, the RADAR page's majority
vote, never read/recalled.
"""

from __future__ import annotations

from core.detectors import keys
from core.detectors.registry import (
    MEMORIZED_HIGH,
    QUERY_TEXT,
    RECALL_VS_REASONING,
    Details,
    Detector,
    DetectorInput,
    DetectorThreshold,
    declare,
)
from core.detectors.shared import text_pass
from core.detectors.thresholds import bundled_calibration, decision_boundary
from core.detectors.wording import REASONING_TYPE, RECALL_TYPE
from core.engine.verdict import UNCALIBRATED
from core.methods.radar import (
    FEATURE_VERSION,
    analyze_prompt,
    analyze_trace,
    classifier_for,
    feature_table_for,
    radar_prompt,
)
from core.methods.radar.store import RADAR_FEATURES


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


def ready(inp: DetectorInput) -> str | None:
    """Keeps the agreement view cheap: RADAR's classifier takes minutes to build the first time."""
    if feature_table_for(inp.handle, compute=False) is None:
        return (
            "RADAR's classifier is not built for this model yet: open the RADAR page once to build it, or build it "
            f"with every other per-model artifact: `python -m core calibrate-model --model {inp.handle.info.name!r}`"
        )
    return None


def recall_or_reasoning(
    detector: Detector, inp: DetectorInput, score: float | None, threshold: DetectorThreshold
) -> tuple[str, DetectorThreshold]:
    """RADAR's own label for the query (the majority vote the RADAR page shows), never read/recalled."""
    details = inp.cache.get(keys.RADAR_DETAILS) or {}
    label = ((details.get("prediction") or {}).get("label") or "").lower()
    rule = DetectorThreshold(None, "RADAR's own rule: a majority of its four classifiers (as on the RADAR page)")
    if score is None or label not in ("recall", "reasoning"):
        return UNCALIBRATED, rule
    return (RECALL_TYPE if label == "recall" else REASONING_TYPE), rule


DETAILS = Details(
    keys.RADAR_DETAILS,
    {
        "text": "the analyzed text (the query alone, RADAR's prompt)",
        "n_tokens": "its tokens",
        "features": "the 37 features of appendix D, by name",
        "prediction": "each classifier's vote, p̄(recall), the majority label, RDS and RCI",
        "feature_version": "the version of the feature definitions",
    },
)

declare(
    {
        "name": "radar",
        "label": "RADAR recall probability (query only)",
        "higher_means": MEMORIZED_HIGH,
        "score": score,
        "cost": "forward",
        "group": RECALL_VS_REASONING,
        "source": "RADAR (2025) §2.3 ensemble over the 37 features of appendix D",
        "short": "RADAR",
        "note": "reads the query alone and says whether it looks like recall or reasoning — another question than "
        "whether this answer read the context",
        "thresholds": (
            bundled_calibration,
            decision_boundary("the ensemble's decision boundary, p̄(recall) = 0.5 (RADAR §2.3)"),
        ),
        "reading": recall_or_reasoning,
        "ready": ready,
        "reads": frozenset({QUERY_TEXT}),
        "artifact": RADAR_FEATURES,
        "details": DETAILS,
        "page": "RADAR",
    }
)
