"""One prompt, end to end: the trace, the 37 features and (given a classifier) the prediction."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from core.methods.radar.classifier import RadarClassifier, RadarPrediction, classifier_from_table
from core.methods.radar.features import FEATURE_VERSION, FEATURES, RCI_FORMULA, RDS_FORMULA, feature_vector
from core.methods.radar.store import FeatureTable
from core.methods.radar.trace import RadarTrace, features_from_trace, trace_prompt
from core.model.handle import ModelHandle


@dataclass(frozen=True)
class RadarAnalysis:
    """Everything the RADAR page shows for one prompt.

    Attributes:
        model: the model's display name.
        text: the analyzed prompt.
        features: the 37 features in appendix D order.
        trace: the forward pass they come from.
        prediction: the ensemble's reading, or ``None`` when no classifier was given.
    """

    model: str
    text: str
    features: dict[str, float]
    trace: RadarTrace
    prediction: RadarPrediction | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the features with their specs, the trace, the prediction and the RDS/RCI formulas."""
        return {
            "model": self.model,
            "text": self.text,
            "features": dict(self.features),
            "feature_specs": [asdict(f) for f in FEATURES],
            "trace": self.trace.to_dict(),
            "prediction": None if self.prediction is None else self.prediction.to_dict(),
            "rds_formula": RDS_FORMULA,
            "rci_formula": RCI_FORMULA,
            "feature_version": FEATURE_VERSION,
        }


def analyze_prompt(handle: ModelHandle, text: str, classifier: RadarClassifier | None = None) -> RadarAnalysis:
    """Features, trajectories and (when a classifier is given) the prediction for one prompt.

    Raises:
        ValueError: see :func:`core.methods.radar.trace.trace_prompt`.
    """
    return analyze_trace(handle, trace_prompt(handle, text), classifier)


def analyze_trace(handle: ModelHandle, trace: RadarTrace, classifier: RadarClassifier | None = None) -> RadarAnalysis:
    """:func:`analyze_prompt` of a prompt already traced (e.g. batched with another text in one forward).

    Raises:
        ValueError: a feature that is not finite.
    """
    features = features_from_trace(trace)
    prediction = classifier.predict(feature_vector(features)[None, :])[0] if classifier is not None else None
    return RadarAnalysis(handle.info.name, trace.text, features, trace, prediction)


def analyze_with_table(handle: ModelHandle, text: str, table: FeatureTable | None) -> RadarAnalysis:
    """:func:`analyze_prompt` with the ensemble of ``table`` (stored, else fitted once:
    :func:`~core.methods.radar.classifier.classifier_from_table`), or without a prediction when there is none."""
    return analyze_prompt(handle, text, classifier_from_table(table) if table is not None else None)
