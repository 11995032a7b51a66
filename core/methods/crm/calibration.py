"""Computing a model's CRM basis from the calibration prompts (two forward passes per prompt).

For each labeled prompt the retrieval and the parametric prompt run once through the model (no generation:
CRM level 3 only needs the prompts); the displacement d_ℓ = h_ℓ^c − h_ℓ^0 at the last prompt token and the
logit-lens KL per layer feed :func:`core.methods.crm.basis.fit_basis`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from core.engine.prepare import prepare_prompts
from core.engine.settings import DualPathSettings
from core.engine.verdict import MEMORIZED
from core.methods.crm.basis import CrmBasis, fit_basis
from core.methods.crm.maths import DEFAULT_LAYER_RULE
from core.methods.crm.prompts import (
    CALIBRATION_PROMPTS,
    CalibrationPrompt,
    load_calibration_prompts,
    prompt_set_digest,
)
from core.methods.crm.store import cache_basis_path, template_key
from core.methods.internals.lens import logit_lens_compare
from core.methods.internals.replay import pair_displacement, trace_prompts
from core.model.handle import ModelHandle
from core.model.progress import Progress

logger = logging.getLogger(__name__)


def calibration_displacements(
    handle: ModelHandle,
    prompts: Sequence[CalibrationPrompt],
    *,
    template: str = "auto",
    progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Displacements at the last prompt token and logit-lens KL per layer for every calibration prompt.

    Two forward passes per prompt (retrieval and parametric prompt), in one model session per prompt.

    Returns:
        ``(D, lens_kl)``: ``(n, L1, d)`` float32 and ``(n, L1)`` float32 (nats).
    """
    settings = DualPathSettings(max_new_tokens=1, score_window=1, template=template)
    n_rows = handle.info.n_layers + 1
    D = np.zeros((len(prompts), n_rows, handle.info.hidden_size), np.float32)
    kl = np.zeros((len(prompts), n_rows), np.float32)
    for i, prompt in enumerate(prompts):
        prepared = prepare_prompts(handle, prompt.query, prompt.context, settings)
        with handle.session():
            retrieval, parametric = trace_prompts(handle, [prepared])
            kl[i] = logit_lens_compare(
                handle, retrieval.residual[0].numpy(), parametric.residual[0].numpy(), top_k=1
            ).kl[:, 0]
        D[i] = pair_displacement(retrieval, parametric)[0]
        if progress is not None:
            progress(i + 1, len(prompts))
    return D, kl


def compute_basis(
    handle: ModelHandle,
    progress: Progress | None = None,
    *,
    template: str = "auto",
    prompts_path: str | Path = CALIBRATION_PROMPTS,
    save: bool = True,
    layer_rule: str = DEFAULT_LAYER_RULE,
) -> CrmBasis:
    """Compute the CRM basis of a model from the bundled calibration prompts and cache it on disk.

    Two forward passes per prompt (``progress(done, total)`` after each prompt), then the directions, the
    calibration statistics and the cross-validated classifier (a few seconds).

    Args:
        template: the prompt template (``"auto"`` resolves as the engine does); a basis is per template.
        save: write it to :func:`core.methods.crm.store.cache_basis_path` (the app and the CLI find it there
            next time).
        layer_rule: the layer-selection rule (:data:`~core.methods.crm.maths.LAYER_RULES`; default the
            paper's within-layer explained-variance ratio).
    """
    prompts = load_calibration_prompts(prompts_path)
    key = template_key(handle, template)
    D, lens_kl = calibration_displacements(handle, prompts, template=key, progress=progress)
    labels = np.array([1 if p.label == MEMORIZED else 0 for p in prompts])
    meta = {
        "prompt_set": Path(prompts_path).name,
        "prompt_set_sha256": prompt_set_digest(prompts),
        "n_prompts": len(prompts),
        "n_memorized": int(labels.sum()),
        "n_grounded": int((1 - labels).sum()),
        "model_source": handle.info.source,
        "position": "last prompt token",
        "layer_index": "0 = embeddings, l + 1 = output of decoder layer l (before the final norm)",
        "evr_definition": "lambda_1 of the layer / total displacement variance over all layers",
        "evr_within_definition": "lambda_1 of the layer / total displacement variance of that layer (PCA's ratio)",
    }
    basis = fit_basis(
        D, labels, lens_kl=lens_kl, model=handle.info.name, template=key, meta=meta, layer_rule=layer_rule
    )
    if save:
        path = basis.save(cache_basis_path(handle, key))
        logger.info("Saved the CRM basis to %s", path)
    return basis
