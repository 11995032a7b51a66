"""The Lookback Lens' features from a lookback-ratio map: pure numpy, no model, no IO.

A *map* is ``lr`` of shape ``(L, H, n)``: the lookback ratio LR_t^{ℓ,h} = A_ctx / (A_ctx + A_new) of head
(ℓ, h) while answer token t was produced (Chuang et al. 2024, eq. 1; :func:`core.model.trace.lookback_ratio`
with ``produced=True``). Its first column is NaN: answer token 0 is produced by the last prompt token, before
any answer token exists, so A_new is undefined there. The features **skip** it (they average over t = 1 … n − 1);
a one-token answer therefore has no lookback features (:func:`span_features` raises).
"""

from __future__ import annotations

import numpy as np

WINDOW = 8
"""The paper's sliding window: 8 answer tokens (Chuang et al. 2024, §3, "span of 8 tokens")."""


def _check_map(lr: np.ndarray) -> np.ndarray:
    x = np.asarray(lr, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"a lookback map is (layers, heads, answer tokens), got shape {x.shape}")
    return x


def defined_tokens(lr: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the answer tokens whose ratio is defined for every head (all but token 0)."""
    return np.all(np.isfinite(_check_map(lr)), axis=(0, 1))


def span_features(lr: np.ndarray) -> np.ndarray:
    """The mean lookback ratio of every head over the answer span: ``(L · H,)`` float64, layer-major
    (feature ``ℓ · H + h`` is head h of layer ℓ), the paper's per-example feature vector.

    Raises:
        ValueError: a map of the wrong rank, or no answer token with a defined ratio (answers of one token).
    """
    x = _check_map(lr)
    ok = defined_tokens(x)
    if not ok.any():
        raise ValueError(
            "the lookback ratio needs an answer of at least two tokens (the first answer token is produced before "
            "any answer token exists, so its ratio is undefined)"
        )
    return x[:, :, ok].mean(axis=-1).reshape(-1)


def windows(n: int, window: int = WINDOW) -> list[tuple[int, int]]:
    """Sliding windows ``[start, stop)`` of ``window`` answer tokens over tokens 1 … n − 1, stride 1 (the defined
    tokens); an answer shorter than one window gives one window over all of its defined tokens, none when it has
    none."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if n < 2:
        return []
    if n - 1 <= window:
        return [(1, n)]
    return [(s, s + window) for s in range(1, n - window + 1)]


def window_features(lr: np.ndarray, window: int = WINDOW) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The paper's sliding-window variant: per window of ``window`` answer tokens, the mean ratio of every head.

    Returns:
        ``(features (n_windows, L · H) float64, the windows [start, stop) in answer-token indices)``.
    """
    x = _check_map(lr)
    spans = windows(x.shape[-1], window)
    if not spans:
        return np.zeros((0, x.shape[0] * x.shape[1])), []
    feats = np.stack([x[:, :, a:b].mean(axis=-1).reshape(-1) for a, b in spans])
    return feats, spans


def head_mean_curve(lr: np.ndarray) -> np.ndarray:
    """``(n,)``: the ratio averaged over every head at each answer token (NaN at token 0) — how much of the
    model's attention looked back at the context while each token was produced."""
    x = _check_map(lr)
    out = np.full(x.shape[-1], np.nan)
    ok = defined_tokens(x)
    out[ok] = x[:, :, ok].mean(axis=(0, 1))
    return out
