"""CRM-LR: logistic regression over the per-layer LTS features, cross-validated, with a bootstrap CI (CRM §2, §3).

**Cross-validation without leakage.** The paper fits PC1 on a calibration subset that is also part of its CV
data. Here the directions, the kept layers and the classifier are all fitted inside each training fold, so
the reported AUC has no leakage (the supervised direction uses labels, which would otherwise leak).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from core.engine.verdict import MEMORIZED
from core.maths.metrics import auc, auc_bootstrap_ci
from core.methods.crm.maths import (
    DEFAULT_LAYER_RULE,
    EVR_THRESHOLD,
    LAYER_RULES,
    PC1,
    SUPERVISED,
    check_displacements,
    check_labels,
    check_layer_rule,
    pc1_directions,
    project,
    select_layers_by_rule,
    supervised_directions,
)

CV_FOLDS = 5
CV_SEED = 42
N_BOOTSTRAP = 1000


def logistic_pipeline() -> Pipeline:
    """The CRM-LR model: ``StandardScaler → LogisticRegression(max_iter=5000)``."""
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))


def fold_features(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    threshold: float,
    layer_rule: str = DEFAULT_LAYER_RULE,
) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """LTS features of one CV fold, every direction and layer set fitted on the training part only.

    Args:
        X_train, X_test: ``(n_train, L1, d)`` and ``(n_test, L1, d)`` displacements.
        y_train: ``(n_train,)`` 0/1 labels.
        threshold: the variance-ratio threshold of the kept layers.
        layer_rule: the layer-selection rule of ``pc1`` / ``supervised`` (:data:`~core.methods.crm.maths.LAYER_RULES`).

    Returns:
        Per feature set (``pc1``, ``supervised`` over the layers kept by ``layer_rule``; ``pc1_<rule>`` over
        the layers kept by each rule, so both rules are reported; ``*_all_layers`` over every varying layer):
        ``(train features, test features, number of features)``.
    """
    pc1, evr, evr_within = pc1_directions(X_train)
    kept_by = {
        rule: select_layers_by_rule(rule, evr, evr_within, threshold) or [int(np.argmax(evr))] for rule in LAYER_RULES
    }
    kept = kept_by[check_layer_rule(layer_rule)]
    varying = [i for i in range(X_train.shape[1]) if np.any(X_train[:, i] != X_train[0, i])]
    out = {}
    for kind, directions in ((PC1, pc1), (SUPERVISED, supervised_directions(X_train, y_train))):
        train, test = project(X_train, directions), project(X_test, directions)
        out[kind] = (train[:, kept], test[:, kept], len(kept))
        out[f"{kind}_all_layers"] = (train[:, varying], test[:, varying], len(varying))
        if kind == PC1:
            for rule, layers in kept_by.items():
                out[f"{PC1}_{rule}"] = (train[:, layers], test[:, layers], len(layers))
    return out


def _checked_baselines(baselines: dict[str, np.ndarray] | None, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The baseline feature matrices as float64, each of ``shape`` ``(n, L1)``."""
    extra = {name: np.asarray(m, dtype=np.float64) for name, m in (baselines or {}).items()}
    for name, m in extra.items():
        if m.shape != shape:
            raise ValueError(f"baseline {name!r} must have shape {shape}, got {m.shape}")
    return extra


def _out_of_fold(
    X: np.ndarray,
    y: np.ndarray,
    extra: dict[str, np.ndarray],
    kinds: list[str],
    splitter: StratifiedKFold,
    threshold: float,
    layer_rule: str,
) -> tuple[dict[str, np.ndarray], dict[str, list[float]], dict[str, list[int]]]:
    """Every feature set's out-of-fold probabilities ``(n,)``, its per-fold AUCs and feature counts."""
    oof = {k: np.zeros(X.shape[0]) for k in kinds}
    fold_aucs: dict[str, list[float]] = {k: [] for k in kinds}
    n_features: dict[str, list[int]] = {k: [] for k in kinds}
    for train, test in splitter.split(np.zeros(len(y)), y):
        lts_features = fold_features(X[train], y[train], X[test], threshold, layer_rule)
        for kind in kinds:
            if kind in lts_features:
                f_train, f_test, n_feat = lts_features[kind]
            else:
                f_train, f_test, n_feat = extra[kind][train], extra[kind][test], extra[kind].shape[1]
            model = logistic_pipeline().fit(f_train, y[train])
            p = model.predict_proba(f_test)[:, 1]
            oof[kind][test] = p
            fold_aucs[kind].append(auc(y[test], p))
            n_features[kind].append(n_feat)
    return oof, fold_aucs, n_features


def checked_inputs(D: np.ndarray, labels: Sequence[int] | np.ndarray, layer_rule: str) -> tuple[np.ndarray, np.ndarray]:
    """What a fit on calibration displacements checks first: the layer rule, then ``D`` and the labels.

    Returns:
        ``(X, y)``: ``D`` as float64 ``(n, L1, d)`` and the labels as ints ``(n,)``.

    Raises:
        ValueError: an unknown layer rule, bad displacements, or labels that are not n zeros and ones.
    """
    check_layer_rule(layer_rule)
    X = check_displacements(D)
    return X, check_labels(labels, X.shape[0])


def crm_classifier(
    D: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    baselines: dict[str, np.ndarray] | None = None,
    folds: int = CV_FOLDS,
    seed: int = CV_SEED,
    n_boot: int = N_BOOTSTRAP,
    threshold: float = EVR_THRESHOLD,
    layer_rule: str = DEFAULT_LAYER_RULE,
) -> dict[str, Any]:
    """CRM-LR on the per-layer LTS features with stratified k-fold CV and a bootstrap CI of the AUC.

    In every fold the PC1 and supervised directions, the kept layers (variance ratio > ``threshold`` under
    ``layer_rule``; ``pc1_<rule>`` reports CRM-LR under each rule) and
    a StandardScaler + logistic regression are fitted on the training part only; the held-out part is
    scored. The out-of-fold probabilities of all prompts give one ROC-AUC (positive class = memorized) and
    a percentile bootstrap 95 % CI (``n_boot`` resamples, ``seed``).

    Args:
        D: ``(n, L1, d)`` calibration displacements at the last prompt token.
        labels: ``(n,)`` 1 = memorized, 0 = grounded.
        baselines: extra per-layer feature matrices ``(n, L1)`` scored the same way on all layers (e.g. the
            L2-norm and logit-lens-KL baselines of CRM appendices E and F).

    Feature sets: ``pc1`` and ``supervised`` over the kept layers (the paper's main CRM-LR, Table 1),
    ``pc1_all_layers`` and ``supervised_all_layers`` over every layer that varies (the all-layer protocol of
    its Tables 6, 24 and 25), and each baseline.

    Returns:
        JSON-ready: ``n``, class counts, ``folds``, ``seed``, ``bootstrap``, ``protocol`` and
        ``feature_sets`` mapping each feature set to ``auc``, ``ci95``, ``fold_auc_mean``,
        ``fold_auc_std`` and ``n_features`` (mean over folds).

    Raises:
        ValueError: bad displacements or labels, a class smaller than ``folds``, or a baseline of another shape.
    """
    X, y = checked_inputs(D, labels, layer_rule)
    counts = np.bincount(y, minlength=2)
    if counts.min() < folds:
        raise ValueError(f"each class needs at least {folds} prompts for {folds}-fold CV, got {counts.tolist()}")
    extra = _checked_baselines(baselines, X.shape[:2])
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    kinds = [
        PC1,
        SUPERVISED,
        *(f"{PC1}_{rule}" for rule in LAYER_RULES),
        f"{PC1}_all_layers",
        f"{SUPERVISED}_all_layers",
        *extra,
    ]
    oof, fold_aucs, n_features = _out_of_fold(X, y, extra, kinds, splitter, threshold, layer_rule)
    report: dict[str, Any] = {}
    for kind in kinds:
        low, high = auc_bootstrap_ci(y, oof[kind], n_boot=n_boot, seed=seed)
        report[kind] = {
            "auc": round(auc(y, oof[kind]), 6),
            "ci95": [round(low, 6), round(high, 6)],
            "fold_auc_mean": round(float(np.mean(fold_aucs[kind])), 6),
            "fold_auc_std": round(float(np.std(fold_aucs[kind])), 6),
            "n_features": round(float(np.mean(n_features[kind])), 2),
        }
    return {
        "n": int(y.size),
        "n_memorized": int(counts[1]),
        "n_grounded": int(counts[0]),
        "positive_class": MEMORIZED,
        "folds": folds,
        "seed": seed,
        "layer_rule": layer_rule,
        "bootstrap": n_boot,
        "protocol": (
            f"StandardScaler + logistic regression, stratified {folds}-fold CV (shuffle, seed {seed}); "
            "PC1/supervised directions and kept layers refitted inside every training fold; AUC of the pooled "
            f"out-of-fold probabilities with a percentile bootstrap 95% CI ({n_boot} resamples)."
        ),
        "feature_sets": report,
    }
