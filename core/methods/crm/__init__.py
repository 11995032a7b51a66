"""Computational Reality Monitoring (CRM): latent trajectory shift, its calibration and its detectors.

Equations (CRM paper, §2, §4.5, appendices E, P, U, V), by module:

* :mod:`~core.methods.crm.maths` — PC1 directions by SVD, the variance-ratio layer selection,
  LTS_ℓ = ⟨h_ℓ^c − h_ℓ^0, v_ℓ⟩ (eq. 1), the supervised direction (eq. 2), the μ ± 2σ audit rule (app. V.1);
* :mod:`~core.methods.crm.classifier` — logistic regression over the per-layer LTS features, stratified
  5-fold CV (seed 42), ROC-AUC with a bootstrap 95 % CI (§2, §3); L2-norm (app. E) and logit-lens KL
  (app. F) baselines scored the same way;
* :mod:`~core.methods.crm.basis` — :class:`CrmBasis` (directions, calibration μ/σ, the fitted classifier) and
  its NPZ form; :mod:`~core.methods.crm.store` — where a model's basis is found;
  :mod:`~core.methods.crm.prompts` and :mod:`~core.methods.crm.calibration` — the labeled prompt set and
  computing a basis with the model;
* :mod:`~core.methods.crm.vocab` — PC1 back-projection through the unembedding (app. U.2);
* :mod:`~core.methods.crm.semantic` — level 1: Δ_seq = 1 − cos(enc(y_0), enc(y_c)) (eq. 3).

Choices where the paper is silent or ambiguous (stated in the UI and the README):

* **Variance ratio (layer selection).** The paper keeps "layers with explained variance ratio > 0.01" (§3,
  appendix P.3). The default rule, ``"within_layer"``, is that rule as written: PCA of layer ℓ's calibration
  displacements, PC1's explained-variance ratio ``evr_within_ℓ = λ₁,ℓ / tr Cov(d_ℓ)`` > 0.01. On n ≈ 100
  prompts the ratio is at least 1/99 for every layer that varies, so the rule keeps every such layer (on the
  embedded model: all 30 decoder layers, the embedding row has no displacement) — the paper's 9–22 kept
  layers of 28–48 cannot be reproduced from its text. The named option ``"share_of_total"`` reads the ratio
  as the share of the *total* calibration displacement variance over all layers,
  ``evr_ℓ = λ₁,ℓ / Σ_ℓ' tr Cov(d_ℓ')``; it keeps few, deep layers (embedded model: 28–29). Both ratios are
  stored, and the classifier report gives CRM-LR under each (``pc1_within_layer``, ``pc1_share_of_total``)
  and on all layers (the paper's all-layer protocol of Tables 6, 24, 25).
* **Sign of PC1** is arbitrary; it is fixed so that the calibration mean of LTS_ℓ is ≥ 0. The supervised
  direction points from the grounded to the memorized class mean.
* **Cross-validation** refits directions, kept layers and classifier inside every training fold (no leakage).
* **Audit rule** over the whole trajectory (every layer, as the paper's audit server does); anomaly score =
  mean_ℓ |LTS_ℓ − μ_ℓ| / σ_ℓ.
* **Calibration data.** The bundled prompt set replaces WikiMIA (see :mod:`~core.methods.crm.prompts`).

What CRM can and cannot conclude (the paper's own caveat): it detects whether internal computation differs
systematically between member-like and non-member-like contexts; it does not certify which source a single
generation used.
"""

from core.methods.crm.basis import BASIS_VERSION, CrmBasis, crm_report, fit_basis, supervised_score
from core.methods.crm.calibration import calibration_displacements, compute_basis
from core.methods.crm.classifier import CV_FOLDS, CV_SEED, N_BOOTSTRAP, crm_classifier
from core.methods.crm.maths import (
    AUDIT_K,
    DEFAULT_LAYER_RULE,
    DIRECTIONS,
    EVR_THRESHOLD,
    LAYER_RULES,
    PC1,
    SHARE_OF_TOTAL,
    SUPERVISED,
    WITHIN_LAYER,
    anomaly_score,
    audit_flags,
    pc1_directions,
    project,
    select_layers,
    supervised_directions,
)
from core.methods.crm.prompts import (
    CALIBRATION_PROMPTS,
    CalibrationPrompt,
    load_calibration_prompts,
    prompt_set_digest,
)
from core.methods.crm.semantic import semantic_delta
from core.methods.crm.store import bundled_basis_path, cache_basis_path, load_basis
from core.methods.crm.vocab import back_projection, unit_directions, vocabulary_projection

__all__ = [
    "AUDIT_K",
    "BASIS_VERSION",
    "CALIBRATION_PROMPTS",
    "CV_FOLDS",
    "CV_SEED",
    "DEFAULT_LAYER_RULE",
    "DIRECTIONS",
    "EVR_THRESHOLD",
    "LAYER_RULES",
    "N_BOOTSTRAP",
    "PC1",
    "SHARE_OF_TOTAL",
    "SUPERVISED",
    "WITHIN_LAYER",
    "CalibrationPrompt",
    "CrmBasis",
    "anomaly_score",
    "audit_flags",
    "back_projection",
    "bundled_basis_path",
    "cache_basis_path",
    "calibration_displacements",
    "compute_basis",
    "crm_classifier",
    "crm_report",
    "fit_basis",
    "load_basis",
    "load_calibration_prompts",
    "pc1_directions",
    "project",
    "prompt_set_digest",
    "select_layers",
    "semantic_delta",
    "supervised_directions",
    "supervised_score",
    "unit_directions",
    "vocabulary_projection",
]
