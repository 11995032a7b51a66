"""RePCS robustness to logit noise (RePCS §V, Table IV): ROC-AUC of −Z_σ per σ over labeled rows.

The noisy scores Z_σ themselves are computed while a batch is scored (the logits exist only then) by
:func:`core.maths.noise.noisy_repcs_scores`, which also states the noise model; this module turns them into
the table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.maths.metrics import auc, auc_bootstrap_ci

DEFAULT_SIGMAS: tuple[float, ...] = (0.0, 0.02, 0.05, 0.10)
PAPER_TABLE_IV: dict[float, float] = {0.0: 0.918, 0.02: 0.915, 0.05: 0.904, 0.10: 0.889}
"""RePCS Table IV (Prompt-WNQA, their back-ends) — for reference only; not comparable to other data."""


def robustness_table(
    labels: np.ndarray,
    z_by_sigma: dict[float, np.ndarray],
    *,
    n_boot: int = 1000,
    seed: int = 42,
) -> list[dict[str, Any]]:
    """ROC-AUC (positive class *memorized*, score −Z_σ: a small Z means memorized) and its bootstrap 95% CI
    per σ.

    Args:
        labels: 1 = memorized, 0 = grounded, shape ``(n,)``.
        z_by_sigma: σ → Z_σ per row, shape ``(n,)`` each.

    Returns:
        ``[{"sigma", "auc", "auc_ci", "n", "paper_auc"}]`` sorted by σ (``paper_auc``: Table IV's value, or
        ``None``).
    """
    y = np.asarray(labels).astype(int)
    rows = []
    for sigma in sorted(z_by_sigma):
        z = np.asarray(z_by_sigma[sigma], dtype=np.float64)
        keep = np.isfinite(z)
        rows.append(
            {
                "sigma": float(sigma),
                "auc": auc(y[keep], -z[keep]),
                "auc_ci": list(auc_bootstrap_ci(y[keep], -z[keep], n_boot=n_boot, seed=seed)),
                "n": int(keep.sum()),
                "paper_auc": PAPER_TABLE_IV.get(round(float(sigma), 4)),
            }
        )
    return rows
