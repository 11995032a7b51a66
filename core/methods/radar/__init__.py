"""RADAR — recall vs reasoning from one instrumented forward pass (RADAR 2025, appendices C–G).

RADAR ("Recall vs. Reasoning Detection through Activation Representation") describes a prompt by 37
features read off the model while it reads the prompt, and classifies it as *recall* (the model "knows"
the answer) or *reasoning* (the model must "compute" it) with a soft-vote ensemble. When a reasoning-type
prompt gets a recall-like signature, RADAR reads that as a sign of contamination (§4.1) — a hint, not proof.

* **Surface features (16, appendix D.1)** from the logit-lens trajectory of the next-token prediction at the
  last prompt position: confidence c_ℓ = max_i p_ℓ,i and entropy H_ℓ (nats) per decoder layer.
* **Mechanistic features (21, appendix D.2)** from per-layer, per-head attention entropies and per-layer
  hidden-state statistics (variance, mean L2 norm, effective rank). Several are proxies, as the paper says.

Modules, one layer each:

* :mod:`~core.methods.radar.features` — the 37 feature specs and names, ``FEATURE_VERSION``, τ, RDS/RCI sets;
* :mod:`~core.methods.radar.maths` — pure feature maths (effective rank, entropies, trajectories → features);
* :mod:`~core.methods.radar.trace` — the one instrumented forward pass (:func:`trace_prompt`);
* :mod:`~core.methods.radar.prompts` — the analyzed text and the bundled labeled prompt sets;
* :mod:`~core.methods.radar.store` — feature tables and their CSV + JSON cache;
* :mod:`~core.methods.radar.classifier` — the soft-vote ensemble, RDS, RCI, the per-model classifier cache;
* :mod:`~core.methods.radar.ensemble` — the fitted ensemble as plain arrays (NPZ, no pickle) and their evaluation;
* :mod:`~core.methods.radar.evaluation` — test-set accuracy next to the paper's Table 1;
* :mod:`~core.methods.radar.analysis` — one prompt end to end.

The names below are re-exported so that ``from core.methods import radar; radar.X`` works.
"""

from __future__ import annotations

from core.methods.radar.analysis import RadarAnalysis, analyze_prompt, analyze_trace, analyze_with_table
from core.methods.radar.classifier import (
    EMBEDDED_ENSEMBLE_PATH,
    ESTIMATOR_TITLES,
    RadarClassifier,
    RadarPrediction,
    build_ensemble,
    classifier_for,
    classifier_from_table,
    cross_validated_accuracy,
    read_classifier,
    save_classifier,
    table_digest,
)
from core.methods.radar.evaluation import (
    EMBEDDED_REPORT_PATH,
    PAPER_RESULTS,
    evaluate_table,
    evaluation_for,
    length_baseline,
    length_control_probability,
    prompt_token_counts,
    report_document,
)
from core.methods.radar.features import (
    EPS,
    FEATURE_NAMES,
    FEATURE_SPECS,
    FEATURE_VERSION,
    FEATURES,
    MECHANISTIC_FEATURES,
    RCI_FEATURES,
    RCI_FORMULA,
    RDS_FEATURES,
    RDS_FORMULA,
    SPECIALIZATION_TAU,
    SURFACE_FEATURES,
    FeatureSpec,
    feature_vector,
)
from core.methods.radar.maths import (
    attention_specialization,
    effective_rank,
    head_entropies,
    mechanistic_features,
    residual_statistics,
    surface_features,
)
from core.methods.radar.prompts import (
    CATEGORY_TITLES,
    LABELS,
    RADAR_DIR,
    REASONING,
    RECALL,
    TEST,
    TEST_CATEGORIES,
    TEST_PATH,
    TRAIN,
    TRAIN_CATEGORIES,
    TRAIN_PATH,
    RadarPrompt,
    load_prompt_sets,
    prompts_signature,
    radar_prompt,
)
from core.methods.radar.store import (
    EMBEDDED_FEATURES_PATH,
    FeatureTable,
    cached_feature_table,
    expected_meta,
    extract_feature_table,
    feature_cache_path,
    feature_table_for,
    read_feature_table,
    save_feature_table,
)
from core.methods.radar.trace import (
    RadarTrace,
    encode_radar_prompt,
    extract_features,
    features_from_trace,
    trace_prompt,
)

__all__ = [
    "CATEGORY_TITLES",
    "EMBEDDED_ENSEMBLE_PATH",
    "EMBEDDED_FEATURES_PATH",
    "EMBEDDED_REPORT_PATH",
    "EPS",
    "ESTIMATOR_TITLES",
    "FEATURES",
    "FEATURE_NAMES",
    "FEATURE_SPECS",
    "FEATURE_VERSION",
    "LABELS",
    "MECHANISTIC_FEATURES",
    "PAPER_RESULTS",
    "RADAR_DIR",
    "RCI_FEATURES",
    "RCI_FORMULA",
    "RDS_FEATURES",
    "RDS_FORMULA",
    "REASONING",
    "RECALL",
    "SPECIALIZATION_TAU",
    "SURFACE_FEATURES",
    "TEST",
    "TEST_CATEGORIES",
    "TEST_PATH",
    "TRAIN",
    "TRAIN_CATEGORIES",
    "TRAIN_PATH",
    "FeatureSpec",
    "FeatureTable",
    "RadarAnalysis",
    "RadarClassifier",
    "RadarPrediction",
    "RadarPrompt",
    "RadarTrace",
    "analyze_prompt",
    "analyze_trace",
    "analyze_with_table",
    "attention_specialization",
    "build_ensemble",
    "cached_feature_table",
    "classifier_for",
    "classifier_from_table",
    "cross_validated_accuracy",
    "effective_rank",
    "encode_radar_prompt",
    "evaluate_table",
    "evaluation_for",
    "expected_meta",
    "extract_feature_table",
    "extract_features",
    "feature_cache_path",
    "feature_table_for",
    "feature_vector",
    "features_from_trace",
    "head_entropies",
    "length_baseline",
    "length_control_probability",
    "load_prompt_sets",
    "mechanistic_features",
    "prompt_token_counts",
    "prompts_signature",
    "radar_prompt",
    "read_classifier",
    "read_feature_table",
    "report_document",
    "residual_statistics",
    "save_classifier",
    "save_feature_table",
    "surface_features",
    "table_digest",
    "trace_prompt",
]
