"""How many labeled rows an AUC and its confidence interval need (small-sample warnings of the Evaluate page).

The standard error of an empirical AUC A with n₁ positive and n₀ negative rows (Hanley & McNeil 1982, eq. 2):

    SE(A)² = [A(1 − A) + (n₁ − 1)(Q₁ − A²) + (n₀ − 1)(Q₂ − A²)] / (n₁ n₀),
    Q₁ = A / (2 − A),  Q₂ = 2A² / (1 + A).

:func:`rows_for_auc_ci` inverts it for a balanced set: the fewest rows per label for which a normal 95 % CI,
A ± 1.96 SE, is at most ± ``half_width`` wide. The planning AUC is the observed one clipped to [0.6, 0.9]: an
AUC of 1.0 on six rows is itself the small-sample artifact, and planning with it would say "six rows suffice".

:data:`MIN_ROWS_PER_LABEL` is the floor below which the page warns whatever the AUC: with fewer than 20 rows of a
label the percentile bootstrap has too few distinct resamples to give a CI (with 3 + 3 rows and perfectly
separated scores every resample has AUC 1, so the "CI" is [1.00, 1.00]).
"""

from __future__ import annotations

import math

MIN_ROWS_PER_LABEL = 20
"""Below this many rows of either label the AUC's bootstrap CI is not trusted (see the module docstring)."""
PLANNING_AUC = (0.6, 0.9)
"""The observed AUC is clipped to this range before it plans a sample size."""


def auc_standard_error(auc: float, n_pos: int, n_neg: int) -> float:
    """Hanley–McNeil standard error of an AUC from ``n_pos`` positive and ``n_neg`` negative rows.

    Raises:
        ValueError: ``auc`` outside [0, 1] or fewer than one row of a class.
    """
    if not 0.0 <= auc <= 1.0:
        raise ValueError(f"auc must lie in [0, 1], got {auc}")
    if n_pos < 1 or n_neg < 1:
        raise ValueError(f"need at least one row of each class, got {n_pos} and {n_neg}")
    q1 = auc / (2.0 - auc)
    q2 = 2.0 * auc * auc / (1.0 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc * auc) + (n_neg - 1) * (q2 - auc * auc)) / (n_pos * n_neg)
    return math.sqrt(max(var, 0.0))


def rows_for_auc_ci(auc: float | None, half_width: float = 0.05, z: float = 1.96, limit: int = 100_000) -> int:
    """Rows *per label* (balanced) for a 95 % CI of the AUC no wider than ``± half_width``.

    Args:
        auc: the observed AUC (``None`` → 0.75); clipped to :data:`PLANNING_AUC`.
        half_width: the CI's half width.
        z: the normal quantile (1.96 for 95 %).

    Raises:
        ValueError: ``half_width`` not in (0, 0.5).
    """
    if not 0.0 < half_width < 0.5:
        raise ValueError(f"half_width must lie in (0, 0.5), got {half_width}")
    low, high = PLANNING_AUC
    a = min(max(0.75 if auc is None or not math.isfinite(auc) else float(auc), low), high)
    n = 2
    while n < limit and z * auc_standard_error(a, n, n) > half_width:
        n = n * 2 if z * auc_standard_error(a, n * 2, n * 2) > half_width else n + 1
    return max(n, MIN_ROWS_PER_LABEL)


def small_sample_message(n_pos: int, n_neg: int, auc: float | None, half_width: float = 0.05) -> str | None:
    """A warning when either label has fewer than the rows a trustworthy CI needs, else ``None``."""
    need = rows_for_auc_ci(auc, half_width)
    if min(n_pos, n_neg) >= need:
        return None
    return (
        f"Only {n_pos} memorized and {n_neg} grounded rows: the AUC and its 95% CI are not reliable yet "
        f"(a bootstrap over so few rows can report [1.00, 1.00]). For a CI about ±{half_width:.2f} wide you need "
        f"about {need} rows of each label (Hanley–McNeil, at AUC ≈ "
        f"{min(max(0.75 if auc is None else auc, PLANNING_AUC[0]), PLANNING_AUC[1]):.2f})."
    )
