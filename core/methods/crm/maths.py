"""CRM level-3 maths: PC1 directions, layer selection, LTS, the supervised direction and the audit rule.

Pure numpy, float64 (no model, no IO). Shapes: ``n`` calibration prompts, ``L1 = n_layers + 1`` hidden-state
rows (0 = embeddings, ℓ + 1 = output of decoder layer ℓ), hidden size ``d``.

* PC1 direction v_ℓ by SVD of the centered calibration displacements of layer ℓ (CRM appendix P.3)
* LTS_ℓ = ⟨h_ℓ^c − h_ℓ^0, v_ℓ⟩                                                        (CRM eq. 1)
* target layers: explained-variance ratio > 0.01 (CRM §3, appendix P.3; :func:`select_layers_by_rule`: the
  paper's within-layer PCA ratio by default, the share-of-total ratio as the named option)
* supervised direction v_sup^(ℓ) = (E[d_ℓ | member] − E[d_ℓ | non-member]) / ‖…‖₂      (CRM eq. 2)
* audit rule: flag layer ℓ when |LTS_ℓ − μ_ℓ| > 2σ_ℓ; anomaly score = mean_ℓ |LTS_ℓ − μ_ℓ| / σ_ℓ (appendix V.1)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EVR_THRESHOLD = 0.01
"""A layer is kept when its PC1 variance ratio exceeds this (CRM §3)."""
WITHIN_LAYER = "within_layer"
"""The paper's rule (CRM §3, appendix P.3: "layers with explained variance ratio > 0.01"): PCA of layer ℓ's
calibration displacements, PC1's explained-variance ratio λ₁,ℓ / tr Cov(d_ℓ) > 0.01. Every layer whose
displacements vary passes it whenever PC1 explains more than 1 % of its layer (on n prompts the ratio is at
least 1/min(n − 1, d)); only layers with (near-)zero displacement variance are filtered."""
SHARE_OF_TOTAL = "share_of_total"
"""The named alternative: λ₁,ℓ / Σ_ℓ' tr Cov(d_ℓ') > 0.01, layer ℓ's PC1 variance as a share of the total over
all layers. It favors the deep layers, whose residual stream is largest (on the embedded model: 28–29 only)."""
LAYER_RULES: tuple[str, str] = (WITHIN_LAYER, SHARE_OF_TOTAL)
DEFAULT_LAYER_RULE = WITHIN_LAYER
AUDIT_K = 2.0
"""The audit rule's band half-width in calibration standard deviations (CRM appendix V.1)."""
PC1 = "pc1"
SUPERVISED = "supervised"
DIRECTIONS: tuple[str, str] = (PC1, SUPERVISED)


def check_displacements(D: np.ndarray) -> np.ndarray:
    """``D`` as a finite float64 array of shape ``(n ≥ 2, L1, d)``.

    Raises:
        ValueError: another number of dimensions, fewer than two rows, or NaN/infinite values.
    """
    X = np.asarray(D, dtype=np.float64)
    if X.ndim != 3:
        raise ValueError(f"displacements must be (n_prompts, n_layers + 1, hidden), got shape {X.shape}")
    if X.shape[0] < 2:
        raise ValueError(f"need at least 2 calibration displacements, got {X.shape[0]}")
    if not np.all(np.isfinite(X)):
        raise ValueError("displacements contain NaN or infinite values")
    return X


def check_labels(labels: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """``labels`` as an int64 ``(n,)`` array of 0/1 (1 = memorized) holding both classes.

    Raises:
        ValueError: another shape, values other than 0/1, or a single class.
    """
    y = np.asarray(labels)
    if y.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {y.shape}")
    if not np.all(np.isin(y, (0, 1))):
        raise ValueError("labels must be 0/1 (1 = memorized)")
    if y.min() == y.max():
        raise ValueError("both classes (memorized = 1 and grounded = 0) are needed")
    return y.astype(np.int64)


def pc1_directions(D: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PC1 of the displacements of every layer (CRM appendix P.3), float64.

    For layer ℓ, the rows ``D[:, ℓ]`` are centered and decomposed by SVD, ``X_c = U S Vᵀ``; v_ℓ = Vᵀ[0],
    oriented so that the mean of ⟨d, v_ℓ⟩ over the calibration set is ≥ 0. Variances are λ = S²/(n − 1).

    Args:
        D: ``(n, L1, d)`` calibration displacements.

    Returns:
        ``(pc1, evr, evr_within)``: unit directions ``(L1, d)`` (zero rows for layers with no variance),
        ``evr_ℓ = λ₁,ℓ / Σ_ℓ' Σ_j λ_j,ℓ'`` (share of the total displacement variance, the layer-selection
        ratio) and ``evr_within_ℓ = λ₁,ℓ / Σ_j λ_j,ℓ`` (PCA's explained-variance ratio inside the layer).
    """
    X = check_displacements(D)
    n, n_layers, dim = X.shape
    pc1 = np.zeros((n_layers, dim))
    lam1 = np.zeros(n_layers)
    total = np.zeros(n_layers)
    for layer in range(n_layers):
        x = X[:, layer]
        xc = x - x.mean(axis=0)
        _, s, vt = np.linalg.svd(xc, full_matrices=False)
        var = s**2 / (n - 1)
        total[layer] = var.sum()
        if total[layer] <= 0.0 or not np.isfinite(total[layer]):
            continue
        v = vt[0]
        mean_proj = float(x.mean(axis=0) @ v)
        if mean_proj < 0 or (mean_proj == 0 and v[np.argmax(np.abs(v))] < 0):
            v = -v
        pc1[layer] = v
        lam1[layer] = var[0]
    grand = total.sum()
    evr = lam1 / grand if grand > 0 else np.zeros(n_layers)
    evr_within = np.divide(lam1, total, out=np.zeros(n_layers), where=total > 0)
    return pc1, evr, evr_within


def supervised_directions(D: np.ndarray, labels: Sequence[int] | np.ndarray) -> np.ndarray:
    """CRM eq. 2: v_sup^(ℓ) = (E[d_ℓ | memorized] − E[d_ℓ | grounded]) / ‖·‖₂ per layer, float64.

    Args:
        D: ``(n, L1, d)`` calibration displacements.
        labels: ``(n,)`` 1 = memorized (member-style), 0 = grounded (non-member).

    Returns:
        ``(L1, d)`` unit directions (a zero row where the class means coincide).
    """
    X = check_displacements(D)
    y = check_labels(labels, X.shape[0])
    diff = X[y == 1].mean(axis=0) - X[y == 0].mean(axis=0)
    norms = np.linalg.norm(diff, axis=-1, keepdims=True)
    return np.divide(diff, norms, out=np.zeros_like(diff), where=norms > 0)


def project(d: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ (CRM eq. 1) for displacements of shape ``(..., L1, d)``; returns ``(..., L1)``."""
    x = np.asarray(d, dtype=np.float64)
    v = np.asarray(directions, dtype=np.float64)
    if v.ndim != 2 or x.shape[-2:] != v.shape:
        raise ValueError(f"displacement {x.shape} does not end in the directions' shape {v.shape}")
    return np.einsum("...ld,ld->...l", x, v)


def select_layers(evr: np.ndarray, threshold: float = EVR_THRESHOLD) -> list[int]:
    """The target layers: those whose variance ratio ``(L1,)`` exceeds ``threshold`` (CRM: 0.01)."""
    r = np.asarray(evr, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"evr must be 1-D, got shape {r.shape}")
    return [int(i) for i in np.nonzero(r > threshold)[0]]


def check_layer_rule(rule: str) -> str:
    """``rule`` if it names a layer-selection rule (:data:`LAYER_RULES`), else ``ValueError``."""
    if rule not in LAYER_RULES:
        raise ValueError(f"layer rule must be one of {', '.join(LAYER_RULES)}, got {rule!r}")
    return rule


def selection_ratio(rule: str, evr_share: np.ndarray, evr_within: np.ndarray) -> np.ndarray:
    """The per-row ratio a rule compares with the threshold: ``evr_within`` for :data:`WITHIN_LAYER` (the
    paper), ``evr_share`` for :data:`SHARE_OF_TOTAL` (both ``(L1,)``, from :func:`pc1_directions`)."""
    return np.asarray(evr_within if check_layer_rule(rule) == WITHIN_LAYER else evr_share, dtype=np.float64)


def select_layers_by_rule(
    rule: str, evr_share: np.ndarray, evr_within: np.ndarray, threshold: float = EVR_THRESHOLD
) -> list[int]:
    """The target layers ℒ under ``rule`` (:data:`WITHIN_LAYER`, the paper's, or :data:`SHARE_OF_TOTAL`)."""
    return select_layers(selection_ratio(rule, evr_share, evr_within), threshold)


def audit_flags(
    lts: np.ndarray, mu: np.ndarray, sigma: np.ndarray, layers: Sequence[int] | None = None, k: float = AUDIT_K
) -> list[int]:
    """CRM appendix V.1's audit rule: layers ℓ (among ``layers``) with |LTS_ℓ − μ_ℓ| > k σ_ℓ (σ_ℓ > 0).

    Args:
        lts, mu, sigma: ``(L1,)`` this run's LTS and the calibration mean and standard deviation.
        layers: the rows to look at (default: all).
        k: the band half-width in standard deviations.
    """
    x, m, s = (np.asarray(a, dtype=np.float64) for a in (lts, mu, sigma))
    if not (x.shape == m.shape == s.shape) or x.ndim != 1:
        raise ValueError(f"lts, mu and sigma must be 1-D of one shape, got {x.shape}, {m.shape}, {s.shape}")
    idx = range(x.size) if layers is None else layers
    return [int(i) for i in idx if s[i] > 0 and abs(x[i] - m[i]) > k * s[i]]


def anomaly_score(lts: np.ndarray, mu: np.ndarray, sigma: np.ndarray, layers: Sequence[int]) -> float:
    """CRM appendix V.1: mean over ``layers`` (with σ > 0) of |LTS_ℓ − μ_ℓ| / σ_ℓ (0 for no layer)."""
    x, m, s = (np.asarray(a, dtype=np.float64) for a in (lts, mu, sigma))
    use = [i for i in layers if s[i] > 0]
    if not use:
        return 0.0
    return float(np.mean(np.abs(x[use] - m[use]) / s[use]))


def zscores(lts: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """(LTS_ℓ − μ_ℓ) / σ_ℓ per row, float64 (0 where σ_ℓ = 0)."""
    x = np.asarray(lts, dtype=np.float64)
    s = np.asarray(sigma, dtype=np.float64)
    return np.divide(x - mu, s, out=np.zeros_like(x), where=s > 0)


L2_FEATURE_NAMES: tuple[str, ...] = ("mean", "max", "var", "early", "late", "has_late", "trend")
"""The CRM level-2 feature vector (appendix P.2's five statistics, the early/late split as three entries)."""


def l2_feature_vector(stats: dict[str, float | int | None]) -> np.ndarray:
    """CRM appendix P.2's level-2 statistics of KL_t as a feature vector ``(7,)`` (:data:`L2_FEATURE_NAMES`).

    ``stats`` is :func:`core.maths.divergence.kl_statistics`'s dict: KL-mean, KL-max, KL-var, the early/late
    split ("first 32 vs. remaining tokens") and KL-trend. The paper scores fixed-length continuations, so its
    late mean always exists; an answer of at most ``split`` tokens has *no* remaining tokens and no late mean.
    The late mean is then encoded as missing — ``late = 0`` with the indicator ``has_late = 0`` (1 when the
    late mean exists) — rather than copied from the early mean, which would make every short answer look as
    if its KL had not changed after the split. A missing mean/max/var/early/trend (an empty answer) is 0.

    Raises:
        ValueError: ``stats`` lacks one of the statistics' keys.
    """
    missing = [k for k in ("mean", "max", "var", "early", "late", "trend") if k not in stats]
    if missing:
        raise ValueError(f"KL statistics lack {', '.join(missing)}")
    late = stats["late"]
    values = [stats["mean"], stats["max"], stats["var"], stats["early"], late, 1.0 if late is not None else 0.0]
    values.append(stats["trend"])
    return np.asarray([0.0 if v is None else float(v) for v in values], dtype=np.float64)
