"""SMA's maths (pure; arrays in, arrays out): the response score, ADS, the three-way label and the per-prompt
summary.

* Response score (eq. 14): r⁽ⁱ⁾ = γ₁ · Len(ŷ⁽ⁱ⁾) / Len(·) + γ₂ · Sim(ŷ⁽ⁱ⁾, ·).
* Agreement score (the context ablation's): γ₁ · min(ρ, 1/ρ) + γ₂ · Sim(ŷ⁽ⁱ⁾, ŷ), ρ = Len(ŷ⁽ⁱ⁾) / Len(ŷ).
* ADS (eq. 20): Diff(β_j) = β_RAG(j) − β_w/o RAG(j).
* Three-way label (eqs. 19, 21, Alg. 1 lines 15–28): β_j ≥ τ → *pretrained member*; otherwise *non-member*
  when min(τ₁, τ₂) ≤ Diff(β_j) < max(τ₁, τ₂), else *retrieved member*.

The ridge of eq. 16 is fitted by captum (:mod:`core.methods.sma.attribution`).
"""

from __future__ import annotations

import numpy as np

PRETRAINED = "pretrained member"
RETRIEVED = "retrieved member"
NON_MEMBER = "non-member"
LABELS = (PRETRAINED, RETRIEVED, NON_MEMBER)

DEFAULT_TAU = 0.1
DEFAULT_TAU1 = 0.1
DEFAULT_TAU2 = -0.1


def response_score(length_ratio: float, similarity: float, gamma_length: float, gamma_similarity: float) -> float:
    """SMA eq. 14: r = γ₁ · length ratio + γ₂ · similarity.

    Args:
        length_ratio: Len(ŷ⁽ⁱ⁾) / Len(reference), both in tokens.
        similarity: Sim(ŷ⁽ⁱ⁾, reference), a cosine in [−1, 1].
        gamma_length, gamma_similarity: γ₁ and γ₂.
    """
    return float(gamma_length) * float(length_ratio) + float(gamma_similarity) * float(similarity)


def agreement_score(length_ratio: float, similarity: float, gamma_length: float, gamma_similarity: float) -> float:
    """Agreement of an answer with the reference answer ŷ: r_agree = γ₁ · min(ρ, 1/ρ) + γ₂ · Sim(ŷ⁽ⁱ⁾, ŷ).

    Eq. 14 rewards length, ``γ₁ · ρ`` with ρ = Len(ŷ⁽ⁱ⁾) / Len(ŷ): an answer *longer* than ŷ scores higher
    than ŷ itself, so a long wrong answer can outscore the reference. Here the length term is symmetric,
    min(ρ, 1/ρ) ∈ [0, 1] (1 only at ρ = 1; 0 for an empty answer), so r_agree ≤ γ₁ + γ₂ with equality exactly
    for an answer of ŷ's length and similarity 1: it peaks at agreement with ŷ and falls with any change, and
    r_agree(ŷ) − r_agree(ŷ⁽ⁱ⁾) ≥ 0 measures how far ŷ⁽ⁱ⁾ moved away from ŷ (used by the context ablation).

    Args:
        length_ratio: ρ = Len(ŷ⁽ⁱ⁾) / Len(ŷ) ≥ 0, both in tokens.
        similarity: Sim(ŷ⁽ⁱ⁾, ŷ), a cosine in [−1, 1].
        gamma_length, gamma_similarity: γ₁ and γ₂.
    """
    rho = float(length_ratio)
    if rho < 0 or not np.isfinite(rho):
        raise ValueError(f"length ratio must be a finite number >= 0, got {length_ratio}")
    symmetric = 0.0 if rho == 0 else min(rho, 1.0 / rho)
    return float(gamma_length) * symmetric + float(gamma_similarity) * float(similarity)


def _same_length_1d(a: np.ndarray, b: np.ndarray, names: str) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` as float64, checked to be 1-D of one length ``(L,)``; ``names`` words the error."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"{names} must be 1-D of the same length, got {a.shape} and {b.shape}")
    return a, b


def ads(beta_on: np.ndarray, beta_off: np.ndarray) -> np.ndarray:
    """SMA eq. 20: Diff(β_j) = β_on(j) − β_off(j), float64.

    Args:
        beta_on, beta_off: β per unit with retrieval on and off, shape ``(L,)``.

    Returns:
        ``(L,)`` float64.

    Raises:
        ValueError: the shapes differ or are not 1-D.
    """
    on, off = _same_length_1d(beta_on, beta_off, "beta_on and beta_off")
    return on - off


def classify_units(
    beta_first: np.ndarray,
    ads: np.ndarray,
    tau: float = DEFAULT_TAU,
    tau1: float = DEFAULT_TAU1,
    tau2: float = DEFAULT_TAU2,
) -> list[str]:
    """The three-way label of every unit (SMA eqs. 19 and 21, Algorithm 1 lines 15–28).

    Args:
        beta_first: the attribution the first tier tests against τ, shape ``(L,)``.
        ads: Diff(β_j) = β_on − β_off, shape ``(L,)``.
        tau: β_j ≥ τ → pretrained member.
        tau1, tau2: the non-member band; ``min(τ₁, τ₂) ≤ Diff < max(τ₁, τ₂)`` → non-member (the paper's
            printed ``τ₁ ≤ Diff < τ₂`` with τ₁ = 0.1, τ₂ = −0.1 is empty as written).

    Returns:
        One of :data:`LABELS` per unit.

    Raises:
        ValueError: the shapes differ or are not 1-D.
    """
    beta_first, diff = _same_length_1d(beta_first, ads, "beta and ADS")
    low, high = min(tau1, tau2), max(tau1, tau2)
    labels = []
    for b, d in zip(beta_first, diff):
        if b >= tau:
            labels.append(PRETRAINED)
        elif low <= d < high:
            labels.append(NON_MEMBER)
        else:
            labels.append(RETRIEVED)
    return labels


def mean_abs_ads(ads: np.ndarray, keep: np.ndarray) -> float:
    """Mean |Diff(β_j)| over the units where ``keep`` is true (the query units); 0.0 when none is kept.

    Args:
        ads: ``(L,)`` ADS per unit.
        keep: ``(L,)`` bool.

    Raises:
        ValueError: the shapes differ.
    """
    diff = np.asarray(ads, dtype=np.float64)
    mask = np.asarray(keep, dtype=bool)
    if diff.shape != mask.shape:
        raise ValueError(f"ads and keep must have the same shape, got {diff.shape} and {mask.shape}")
    chosen = diff[mask]
    return float(np.mean(np.abs(chosen))) if chosen.size else 0.0
