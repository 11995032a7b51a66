"""CRM detectors: L1 (answer embeddings), L3 LTS along the supervised direction, CRM-LR on PC1 features.

The per-row helpers (:func:`basis_for`, :func:`displacement_for`, :func:`parametric_answer`) keep their work
in ``DetectorInput.cache`` under :mod:`core.detectors.keys`, so the displacement is paid once per row whichever
CRM detectors run (the fitted ``crm_lr_cv`` included): h^c from the retrieval path's pass that the Lookback Lens
and ReDeEP share (:mod:`core.detectors.shared`), h^0 from one forward of the parametric prompt.
"""

from __future__ import annotations

import numpy as np

from core.detectors import keys
from core.detectors.registry import (
    GROUNDED_HIGH,
    MEMORIZED_HIGH,
    PROMPT_STATES,
    Detector,
    DetectorInput,
    DetectorThreshold,
    declare,
)
from core.detectors.shared import parametric_state, retrieval_state
from core.detectors.thresholds import DEFAULT_ALPHA, alpha_threshold, bundled_calibration, decision_boundary
from core.engine.generation import generate_greedy
from core.engine.prepare import prepare_prompts
from core.methods.crm import PC1, SUPERVISED, CrmBasis, load_basis, semantic_delta, supervised_score
from core.methods.crm.store import CRM_BASIS
from core.methods.internals import displacement
from core.model.calibration_store import missing_artifact

PAGE = "Layer trajectories"


def basis_for(inp: DetectorInput) -> CrmBasis:
    """The CRM basis of the row's model and template, cached per row (``ValueError`` when none exists)."""
    basis = inp.cache.get(keys.CRM_BASIS)
    if basis is None:
        basis = load_basis(inp.handle, inp.result.template)
        if basis is None:
            raise ValueError(
                missing_artifact("CRM basis", inp.handle, inp.result.template)
                + " `python -m core crm-basis` (or the Layer trajectories page) computes the basis alone."
            )
        inp.cache[keys.CRM_BASIS] = basis
    return basis


def displacement_for(inp: DetectorInput) -> np.ndarray:
    """The row's per-layer displacement h^c − h^0 at the last prompt token, cached per row (h^c from the row's
    shared traced forward of the retrieval path, :mod:`core.detectors.shared`; h^0 from the run's scoring pass
    when it recorded it, else one forward of its own)."""
    if keys.CRM_DISPLACEMENT not in inp.cache:
        inp.cache[keys.CRM_DISPLACEMENT] = displacement(
            inp.handle, inp.result, retrieval_state(inp), parametric_state(inp)
        )
    return inp.cache[keys.CRM_DISPLACEMENT]


def parametric_answer(inp: DetectorInput) -> str:
    """The parametric path's own free answer y_0 (generated greedily when the result has none)."""
    if inp.result.parametric.answer or inp.result.parametric.token_ids:
        return inp.result.parametric.answer
    if keys.CRM_PARAMETRIC_ANSWER not in inp.cache:
        settings = inp.result.run_settings
        prepared = prepare_prompts(inp.handle, inp.result.query, inp.result.context, settings)
        ((ids, _, _),) = generate_greedy(inp.handle, [prepared.parametric.ids], settings)
        inp.cache[keys.CRM_PARAMETRIC_ANSWER] = inp.handle.tokenizer.decode(ids, skip_special_tokens=True).strip()
    return inp.cache[keys.CRM_PARAMETRIC_ANSWER]


def score_l1(inp: DetectorInput) -> float:
    """CRM eq. 3 between the parametric and the retrieval answer."""
    return semantic_delta(parametric_answer(inp), inp.result.retrieval.answer)


def score_lts(inp: DetectorInput) -> float:
    """Mean supervised-direction z-score over layers (CRM §4.5 eq. 2, standardized by the calibration)."""
    basis = basis_for(inp)
    return supervised_score(basis, basis.lts(displacement_for(inp), SUPERVISED))


def score_l2(inp: DetectorInput) -> float:
    """Mean over the decoder layers of ‖h_ℓ^c − h_ℓ^0‖ at the last prompt token (CRM appendix E's L2-norm
    baseline as one number; on the bundled calibration a larger shift goes with memorized prompts)."""
    return float(np.linalg.norm(np.asarray(displacement_for(inp), dtype=np.float64)[1:], axis=-1).mean())


def score_lr(inp: DetectorInput) -> float:
    """P(memorized) of the bundled CRM-LR over the kept-layer PC1 LTS features."""
    basis = basis_for(inp)
    return basis.lr_probability(basis.lts(displacement_for(inp), PC1))


def basis_calibration(detector: Detector, inp: DetectorInput) -> DetectorThreshold | None:
    """The L2-norm baseline's threshold from the CRM basis' own calibration prompts (RePCS Algorithm 1 over the
    grounded ones); ``None`` without a basis."""
    try:
        basis = basis_for(inp)
    except ValueError:
        return None
    per_prompt = np.asarray(basis.calib_l2, dtype=np.float64)[:, 1:].mean(axis=1)
    clean = per_prompt[np.asarray(basis.calib_labels) == 0]
    if clean.size == 0:
        return None
    value = alpha_threshold(clean, detector.higher_means)
    return DetectorThreshold(
        value, f"CRM basis calibration: {DEFAULT_ALPHA:.0%}-quantile over its {clean.size} grounded prompts"
    )


declare(
    {
        "name": "crm_l1",
        "label": "CRM L1: 1 − cos of the two answers' embeddings",
        "higher_means": GROUNDED_HIGH,
        "score": score_l1,
        "cost": "generate",
        "source": "CRM appendix P.1, eq. 3 (embedder: all-MiniLM-L6-v2 instead of BGE-M3)",
        "short": "CRM L1",
        "reads": frozenset(),
        "artifact": None,
    },
    {
        "name": "crm_lts",
        "label": "CRM LTS: mean supervised-direction z-score over layers",
        "score": score_lts,
        "source": "CRM §4.5 eq. 2 (supervised direction), standardized by the calibration μ/σ (appendix V.1)",
        "short": "CRM LTS",
    },
    {
        "name": "crm_l2",
        "label": "CRM L2-norm: mean ‖h^c − h^0‖ over layers",
        "score": score_l2,
        "source": "CRM appendix E (L2-norm baseline of the displacement), averaged over the decoder layers",
        "short": "CRM L2-norm",
        "thresholds": (bundled_calibration, basis_calibration),
    },
    {
        "name": "crm_lr",
        "label": "CRM-LR: P(memorized) from the kept-layer PC1 LTS features",
        "score": score_lr,
        "source": "CRM §2 eq. 1, logistic regression over Φ_L3 fitted on the bundled calibration prompts",
        "short": "CRM-LR",
        "thresholds": (
            bundled_calibration,
            decision_boundary("the logistic regression's decision boundary, P(memorized) = 0.5"),
        ),
    },
    higher_means=MEMORIZED_HIGH,
    cost="forward",
    reads=frozenset({PROMPT_STATES}),
    artifact=CRM_BASIS,
    page=PAGE,
)
