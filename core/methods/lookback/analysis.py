"""What the Attention page shows of the Lookback Lens for one run: the map, the per-token curve, the windows.

:func:`analyze` runs the one traced forward (:func:`core.methods.lookback.features.lookback_map`) and, when a
classifier exists for the model (:func:`core.methods.lookback.model.model_for`), scores the whole answer and
every sliding window of 8 answer tokens with it — so a reader sees *where* in the answer the heads stopped
looking back at the context. Without a classifier the map and the head-averaged curve are still shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.engine import DualPathResult
from core.methods.lookback.features import lookback_map
from core.methods.lookback.maths import WINDOW, head_mean_curve, span_features, window_features
from core.methods.lookback.model import LookbackModel, model_for
from core.model.calibration_store import missing_artifact
from core.model.handle import ModelHandle


@dataclass
class LookbackAnalysis:
    """One run's Lookback Lens view.

    Attributes:
        lr: ``(L, H, n)`` float32 lookback ratios (column 0 NaN: no earlier answer token).
        answer_tokens: the ``n`` answer tokens.
        curve: ``(n,)`` the ratio averaged over every head at each answer token (NaN at token 0).
        windows: the sliding windows ``[start, stop)`` of :data:`~core.methods.lookback.maths.WINDOW` tokens.
        window_mean: ``(n_windows,)`` the head-averaged ratio of each window.
        window_p: ``(n_windows,)`` P(recalled) of each window under the classifier (empty without one).
        p_recalled: the classifier's P(recalled) of the whole answer (``None`` without a classifier or for a
            one-token answer); ``tau``: its threshold.
        classifier: where the classifier came from, or why there is none.
    """

    lr: np.ndarray
    answer_tokens: list[str]
    curve: np.ndarray
    windows: list[tuple[int, int]]
    window_mean: np.ndarray
    window_p: np.ndarray
    p_recalled: float | None = None
    tau: float | None = None
    classifier: str = ""
    window: int = WINDOW
    notes: list[str] = field(default_factory=list)

    @property
    def mean_ratio(self) -> float | None:
        """The ratio averaged over every head and answer token with a ratio (``None`` for a one-token answer)."""
        finite = self.curve[np.isfinite(self.curve)]
        return float(finite.mean()) if finite.size else None

    @property
    def verdict(self) -> str | None:
        """``"recalled"`` when P(recalled) > τ, ``"read"`` otherwise, ``None`` without a classifier."""
        if self.p_recalled is None or self.tau is None:
            return None
        return "recalled" if self.p_recalled > self.tau else "read"

    def table(self) -> list[dict[str, Any]]:
        """One record per (layer, head, answer token): the CSV export of the map."""
        L, H, n = self.lr.shape
        return [
            {
                "layer": layer,
                "head": head,
                "t": t,
                "token": self.answer_tokens[t] if t < len(self.answer_tokens) else "",
                "lookback_ratio": None if not np.isfinite(self.lr[layer, head, t]) else float(self.lr[layer, head, t]),
            }
            for layer in range(L)
            for head in range(H)
            for t in range(n)
        ]

    def window_table(self) -> list[dict[str, Any]]:
        """One record per sliding window: its tokens, the head-averaged ratio and P(recalled)."""
        return [
            {
                "start": a,
                "stop": b,
                "tokens": "".join(self.answer_tokens[a:b]),
                "mean_lookback_ratio": float(self.window_mean[i]),
                "p_recalled": float(self.window_p[i]) if len(self.window_p) else None,
            }
            for i, (a, b) in enumerate(self.windows)
        ]


def analyze_map(
    lr: np.ndarray, answer_tokens: list[str], model: LookbackModel | None, *, window: int = WINDOW
) -> LookbackAnalysis:
    """The view of a lookback map (pure: no model call)."""
    x = np.asarray(lr, dtype=np.float32)
    feats, spans = window_features(x, window)
    window_mean = np.array([float(np.mean(x[:, :, a:b])) for a, b in spans])
    notes = []
    p = None
    window_p = np.zeros(0)
    if x.shape[-1] < 2:
        notes.append("A one-token answer has no lookback ratio: its only token is produced before any answer token.")
    if model is not None and spans:
        window_p = model.probabilities(feats)
        p = model.probability(span_features(x))
    return LookbackAnalysis(
        lr=x,
        answer_tokens=list(answer_tokens),
        curve=head_mean_curve(x),
        windows=spans,
        window_mean=window_mean,
        window_p=window_p,
        p_recalled=p,
        tau=None if model is None else model.tau,
        classifier="" if model is None else f"fitted on {model.n_memorized + model.n_grounded} rows",
        window=window,
        notes=notes,
    )


def analyze(handle: ModelHandle, result: DualPathResult, *, window: int = WINDOW) -> LookbackAnalysis:
    """One traced forward of the retrieval path and the classifier of this model, if any.

    Raises:
        ValueError: a result of another model, an empty answer, a model without attention weights.
    """
    m = lookback_map(handle, result)
    model = model_for(handle, result.template)
    out = analyze_map(m.lr, m.answer_tokens, model, window=window)
    if model is None:
        out.classifier = missing_artifact("Lookback Lens classifier", handle, result.template)
    else:
        out.classifier = (
            f"{out.classifier} ({', '.join(str(t.get('path')) for t in model.trained_on) or 'calibration data'}); "
            f"τ = {model.tau:.3f} at α = {model.alpha:g}"
        )
    return out
