"""The Lookback Lens (Chuang et al. 2024, "Lookback Lens: Detecting and Mitigating Contextual Hallucinations in
Large Language Models Using Only Attention Maps", EMNLP 2024).

For every head (ℓ, h) and answer token t, the lookback ratio LR_t^{ℓ,h} = A_ctx / (A_ctx + A_new): A_ctx the
mean attention weight, while token t was produced, on the context tokens; A_new the mean weight on the answer
tokens generated before t (each a mean over its segment's tokens, so segment length does not decide it). The
per-example features are the mean LR of each head over the answer (``L · H`` of them); a logistic regression on
them says whether the answer was read from the context. The sliding-window variant scores windows of 8 answer
tokens.

* :mod:`~core.methods.lookback.maths` — span and window features from a map (pure);
* :mod:`~core.methods.lookback.features` — the one traced forward per row (batched), through
  :func:`core.model.trace.trace`;
* :mod:`~core.methods.lookback.model` — the classifier: fit (scikit-learn), JSON file, the artifact store;
* :mod:`~core.methods.lookback.analysis` — the Attention page's view of one run.

What it can and cannot conclude: the paper built it for *contextual hallucination* in 7B chat models (does a
summary or an answer stay faithful to a given document?), with a classifier trained on that model's own labeled
generations. Here the label is read vs recalled under a knowledge conflict, on whatever model is loaded; a high
P(recalled) says that the heads the classifier weighs looked back at the prompt less than on recalled
calibration rows — an attention pattern, not a proof of where the answer came from. The first answer token has
no ratio (no earlier answer token); a one-token answer has no features.
"""

from core.methods.lookback.analysis import LookbackAnalysis, analyze, analyze_map
from core.methods.lookback.features import LookbackMap, lookback_map, lookback_maps
from core.methods.lookback.maths import WINDOW, head_mean_curve, span_features, window_features, windows
from core.methods.lookback.model import (
    LOOKBACK_MODEL,
    LookbackModel,
    bundled_model_path,
    cache_model_path,
    fit_lookback,
    model_for,
)

__all__ = [
    "LOOKBACK_MODEL",
    "WINDOW",
    "LookbackAnalysis",
    "LookbackMap",
    "LookbackModel",
    "analyze",
    "analyze_map",
    "bundled_model_path",
    "cache_model_path",
    "fit_lookback",
    "head_mean_curve",
    "lookback_map",
    "lookback_maps",
    "model_for",
    "span_features",
    "window_features",
    "windows",
]
